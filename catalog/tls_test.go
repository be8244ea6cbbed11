package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
)

// TestOpenOverVerifiedTLS: the metastore's URL carries its TLS settings
// (pgx reads sslmode, sslrootcert, sslcert, sslkey), as deploy/README.md
// documents. Against a throwaway Postgres that accepts TLS only, with a
// certificate for db.nova.test and 127.0.0.1 from a CA of the test's: catalog.Open with
// sslmode=verify-full and that CA connects over TLS; with another CA, or
// by a host name the certificate does not name, it fails saying why
// (ErrRefused: the URL's settings, not the network);
// verify-ca checks the chain and not the name; without TLS the server
// refuses. Skips without the Postgres server binaries (the services are a
// Postgres to connect to, which may run elsewhere).
func TestOpenOverVerifiedTLS(t *testing.T) {
	ca := testenv.NewCA(t)
	cert, key := ca.Issue(t, "db.nova.test", "127.0.0.1")
	port := testenv.StartTLSPostgres(t, cert, key)
	caFile, otherCA := ca.File(t), testenv.NewCA(t).File(t)
	url := func(host, params string) string {
		return fmt.Sprintf("postgres://postgres@%s:%d/postgres?connect_timeout=5&%s", host, port, params)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for name, u := range map[string]string{
		"verify-full with the CA":        url("127.0.0.1", "sslmode=verify-full&sslrootcert="+caFile),
		"verify-ca by another host name": url("localhost", "sslmode=verify-ca&sslrootcert="+caFile),
	} {
		db, err := catalog.Open(ctx, u)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ssl bool
		err = db.Pool().QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl)
		db.Close()
		if err != nil || !ssl {
			t.Fatalf("%s: the connection is not TLS (ssl=%v, %v)", name, ssl, err)
		}
	}

	for name, c := range map[string]struct{ url, want string }{
		"another CA":      {url("127.0.0.1", "sslmode=verify-full&sslrootcert="+otherCA), "certificate signed by unknown authority"},
		"wrong host name": {url("localhost", "sslmode=verify-full&sslrootcert="+caFile), "not localhost"},
		"no TLS":          {url("127.0.0.1", "sslmode=disable"), "no encryption"},
		"no such CA file": {url("127.0.0.1", "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"), "/nonexistent/ca.pem"},
	} {
		db, err := catalog.Open(ctx, c.url)
		if err == nil {
			db.Close()
			t.Fatalf("%s: connected", name)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", name, err, c.want)
		}
		// Each is the URL's settings at fault, not the network: a
		// configuration error (exit 2), never ErrUnreachable (exit 5).
		if name != "no such CA file" && (!errors.Is(err, catalog.ErrRefused) || errors.Is(err, catalog.ErrUnreachable)) {
			t.Errorf("%s: %v is not ErrRefused alone", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestConnectTimeoutFromTheURL: a URL's connect_timeout bounds connecting
// (deploy/README.md, "Transport"); without one, 5 s.
func TestConnectTimeoutFromTheURL(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]time.Duration{
		"postgres://u@127.0.0.1:1/db?connect_timeout=17&sslmode=verify-full": 17 * time.Second,
		"postgres://u@127.0.0.1:1/db?sslmode=disable":                        5 * time.Second,
	} {
		db, err := catalog.OpenLazy(url)
		if err != nil {
			t.Fatal(err)
		}
		got := db.Pool().Config().ConnConfig.ConnectTimeout
		db.Close()
		if got != want {
			t.Errorf("%s: connect timeout %v, want %v", url, got, want)
		}
	}
}
