package sim

import (
	"testing"

	"github.com/nova/auditor/internal/testenv/teststore"
)

// backend is a real object store under test.
type backend struct {
	name    string
	storage func(t testing.TB) Storage
}

// backends are the file backend and the real S3 server (versitygw), each
// with a standard bucket and an express set of two buckets per test
// (teststore).
func backends() []backend {
	var out []backend
	for _, o := range teststore.All(teststore.Options{Zones: 2, Prefix: "nsim"}) {
		out = append(out, backend{o.Name, func(t testing.TB) Storage {
			b := o.Open(t)
			return Storage{Store: b.Store, Standard: b.Std, Express: b.Express}
		}})
	}
	return out
}
