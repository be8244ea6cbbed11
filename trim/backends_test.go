package trim_test

import (
	"testing"

	"github.com/nova/auditor/objstore"
)

// namedStore is a backend the tests run against, with the buckets made for
// them (the standard bucket first, then an express set).
type namedStore struct {
	name    string
	store   objstore.Store
	buckets []string
}

// realStores returns the real backends available to the tests.
func realStores(tb testing.TB) []namedStore { return nil }
