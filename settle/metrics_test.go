package settle_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/settle"
)

// TestMetricsDuplicateIsAnError: registering the settle metrics twice on
// one registry returns an error (it used to panic in MustRegister).
func TestMetricsDuplicateIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := settle.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := settle.NewMetrics(reg); err == nil {
		t.Fatal("a second registration on the same registry succeeded")
	}
}
