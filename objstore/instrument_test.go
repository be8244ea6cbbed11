package objstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/objstore/storetest"
)

// TestInstrumentedContract: the metrics wrapper every production store
// goes through keeps the store contract (here over the file backend).
func TestInstrumentedContract(t *testing.T) {
	fs, err := filestore.New(objstore.FileConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := objstore.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.Instrument(fs, m)
	var n atomic.Int64
	storetest.Run(t, storetest.Harness{Store: s, NewBucket: func(t *testing.T) string {
		b := fmt.Sprintf("b%d", n.Add(1))
		if err := fs.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
		return b
	}})
}
