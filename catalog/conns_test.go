package catalog_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
)

// limitedRole is a login role the server lets hold limit connections at
// once (CONNECTION LIMIT: past it the server refuses with SQLSTATE 53300,
// as at max_connections), and the test database's URL as that role.
func limitedRole(t *testing.T, limit int) string {
	t.Helper()
	_, dbURL := testenv.MigratedDB(t)
	admin := testenv.Conn(t, dbURL)
	role := "nova_conns_" + testenv.RandomSuffix(4)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN CONNECTION LIMIT `+strconv.Itoa(limit)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// A connection the server refuses for its limit is counted (when and how
// many), retryable, and told apart from other errors; the pool's other
// connections go on working.
func TestRefusedConnectionsAreCountedAndRetryable(t *testing.T) {
	t.Parallel()
	u := limitedRole(t, 1)
	ref := &catalog.Refusals{}
	app := "nova-test-" + testenv.RandomSuffix(4)
	db, err := catalog.OpenBudgeted(u, catalog.PoolOptions{MaxConns: 3, AppName: app, Refusals: ref})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	held, err := db.Pool().Acquire(ctx) // the role's one connection
	if err != nil {
		t.Fatal(err)
	}
	if ref.Count() != 0 || !ref.Last().IsZero() {
		t.Fatalf("refusals before any: %d at %v", ref.Count(), ref.Last())
	}
	_, err = db.Now(ctx) // needs a second connection
	if !catalog.IsTooManyConnections(err) || !catalog.IsRetryable(err) {
		t.Fatalf("a second connection: %v (want too many connections, retryable)", err)
	}
	if ref.Count() != 1 || ref.Last().IsZero() {
		t.Errorf("refusals: %d at %v, want 1", ref.Count(), ref.Last())
	}
	held.Release()
	sc, err := db.ServerConns(ctx, app) // on the connection given back
	if err != nil {
		t.Fatalf("with the connection back: %v", err)
	}
	if sc.Max < 1 || sc.Reserved < 0 || sc.Usable() > sc.Max || sc.InUse < 1 || sc.Budgeted != 1 {
		t.Errorf("server connections %+v: want the one session named %s among those in use", sc, app)
	}
	if catalog.IsTooManyConnections(context.Canceled) || catalog.IsTooManyConnections(nil) {
		t.Error("other errors count as too many connections")
	}
}
