package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/sim"
)

// rolesScript is the least-privilege script under test.
const rolesScript = "../../deploy/postgres-roles.sql"

// denied is the text of Postgres's insufficient_privilege error as pgx
// prints it: what a missing grant looks like in any command's output.
const denied = "SQLSTATE 42501"

// TestLeastPrivilegeRoles holds deploy/postgres-roles.sql to what the
// auditor does, on a database that revokes CONNECT from PUBLIC:
//
//   - the script run before any migration creates the roles and the schema
//     and says the grants wait; `auditor migrate` runs as the migration
//     role, which then owns every table; the script run again grants;
//   - every command of the auditor but migrate runs as the auditor role
//     through a whole life of a star (roleRun.scenario: settle, erase, the
//     erase step's rewrite, retention, trim, reap past the grace with a
//     range that fails partway, a quarantine and its release, pause,
//     resume, trigger, serve with its admin requests, runtime record and
//     history pruning, a fleet member's claim, run, hand-off and leave,
//     status, verify, reconcile, doctor) with no permission denied
//     anywhere in its output (debug logs included), and the work is seen
//     done (a tombstone revision, the erasure applied, reaped keys and
//     slots, verify clean);
//   - every grant of the script is needed: for each one (one column of a
//     column list at a time), the same life on a copy of the database and
//     the store with only that grant revoked stops at a permission denied
//     on that object; and each of the migration role's grants on the
//     database: migrate fails without it;
//   - a database migrated by another role is handed to the migration
//     role; one newer than the script is refused.
//
// A grant the code needs and the script lacks fails the full run; one the
// script gives and nothing uses fails its revocation run.
func TestLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx := context.Background()
	roles := newTestRoles(t)
	script := roles.script(t)

	// The template: roles, migrations as the migration role, grants, and
	// the write path's first traffic (as the superuser).
	tmplURL := testenv.FreshDatabase(t)
	tmplRoot := t.TempDir()
	notices := hardenAndApply(t, tmplURL, script)
	if !slices.ContainsFunc(notices, func(n string) bool { return strings.Contains(n, "not migrated") }) {
		t.Fatalf("the script before the migrations does not say the grants wait: %q", notices)
	}
	if code, out, errs := runCLI(t, "migrate", "--database-url", roleURL(t, tmplURL, roles.migrate)); code != 0 {
		t.Fatalf("migrate as %s: exit %d %s %s", roles.migrate, code, out, errs)
	}
	if notices := applyScript(t, tmplURL, script); len(notices) != 0 {
		t.Fatalf("the script after the migrations: %q", notices)
	}
	roles.checkOwnership(t, tmplURL)
	func() {
		db, err := catalog.Open(ctx, tmplURL)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		store := newRoleStore(t, tmplRoot)
		if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 4, FenceWindow: 2, Content: sim.DefaultContent(5)}); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.Write(ctx, db, sim.Storage{Store: store, Standard: roleBucket}, sim.WriteOptions{Star: "s1", Flights: 12,
			FlightBytes: 256 << 10, FlightInterval: time.Minute, Session: 1}); err != nil {
			t.Fatal(err)
		}
	}()
	t.Logf("template ready in %s", time.Since(start).Round(time.Millisecond))

	// The whole life as the auditor role, every grant in place.
	full := newRoleRun(t, roles, tmplURL, tmplRoot, script, grantUnit{})
	if err := full.scenario(ctx); err != nil {
		t.Fatalf("the auditor role's run with every grant: %v\n%s", err, full.log.String())
	}
	t.Logf("the full run (%d commands as %s) took %s", full.commands, roles.auditor, full.took.Round(time.Millisecond))
	dropDatabase(t, full.su)

	// Every grant is needed: the same life without it stops at a
	// permission denied.
	units := auditorGrants(t, script, roles.auditor)
	runs := make([]*roleRun, len(units))
	workers := max(2, runtime.GOMAXPROCS(0)*2)
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	revoked := time.Now()
	for i, u := range units {
		sem <- struct{}{}
		r := newRoleRun(t, roles, tmplURL, tmplRoot, script, u)
		runs[i] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r.err = r.scenario(ctx)
			dropDatabase(t, r.su) // now, not all at the end
		}()
	}
	wg.Wait()
	for _, r := range runs {
		var d *deniedError
		switch {
		case r.err == nil:
			t.Errorf("%s is never needed: the whole life ran without it (%d commands)", r.revoke, r.commands)
		case !errors.As(r.err, &d):
			t.Errorf("without %s the life broke without a permission denied: %v\n%s", r.revoke, r.err, r.log.String())
		case !strings.Contains(d.line, r.revoke.deniedOn()):
			t.Errorf("without %s the permission denied is not %q: %s", r.revoke, r.revoke.deniedOn(), d.line)
		default:
			t.Logf("without %s: %s", r.revoke, d.Error())
		}
	}
	t.Logf("%d revocation runs took %s (%d at a time)", len(runs), time.Since(revoked).Round(time.Millisecond), workers)

	// The migration role's grants on the database: migrate fails without
	// either.
	for _, priv := range []string{"CONNECT", "CREATE"} {
		url := testenv.FreshDatabase(t)
		hardenAndApply(t, url, script)
		execSQL(t, url, fmt.Sprintf("REVOKE %s ON DATABASE %s FROM %s", priv, dbName(t, url), roles.migrate))
		code, out, errs := runCLI(t, "migrate", "--database-url", roleURL(t, url, roles.migrate))
		if code == 0 || !strings.Contains(errs, denied) {
			t.Errorf("migrate without %s on the database: exit %d %q %q (want a permission denied)", priv, code, out, errs)
		}
	}

	// A database migrated before the roles (by the superuser): the script
	// hands every table to the migration role, which migrates it from then
	// on. One newer than the script is refused.
	url := testenv.FreshDatabase(t)
	if code, out, errs := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate as the superuser: exit %d %s %s", code, out, errs)
	}
	hardenAndApply(t, url, script)
	roles.checkOwnership(t, url)
	if code, out, errs := runCLI(t, "migrate", "--database-url", roleURL(t, url, roles.migrate)); code != 0 || !strings.Contains(out, "already current") {
		t.Errorf("migrate as %s after the hand-over: exit %d %q %q", roles.migrate, code, out, errs)
	}
	execSQL(t, url, `INSERT INTO nova.schema_migrations (version, name) VALUES (999, 'future')`)
	if _, err := tryScript(t, url, script); err == nil || !strings.Contains(err.Error(), "version 999, this script knows") {
		t.Errorf("the script on a newer schema: %v (want a refusal)", err)
	}
	t.Logf("in all %s", time.Since(start).Round(time.Millisecond))
}

// testRoles are the roles of the script under names of this test's own
// (roles are global to the server; tests run in parallel).
type testRoles struct{ auditor, migrate, readonly string }

func newTestRoles(t *testing.T) testRoles {
	sfx := testenv.RandomSuffix(4)
	r := testRoles{auditor: "pgr_" + sfx, migrate: "pgr_" + sfx + "_migrate", readonly: "pgr_" + sfx + "_reader"}
	// Registered before any database is made: it runs after they are
	// dropped, when nothing depends on the roles any more.
	t.Cleanup(func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
		if err != nil {
			t.Logf("drop roles: %v", err)
			return
		}
		defer c.Close(ctx)
		for _, role := range []string{r.auditor, r.migrate, r.readonly} {
			if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+role); err != nil {
				t.Logf("drop role %s: %v", role, err)
			}
		}
	})
	return r
}

// script is deploy/postgres-roles.sql with the roles renamed.
func (r testRoles) script(t *testing.T) string {
	b, err := os.ReadFile(rolesScript)
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer("nova_migrator", r.migrate, "nova_reader", r.readonly, "nova_auditor", r.auditor).Replace(string(b))
}

// checkOwnership: the migration role owns the schema and every table and
// sequence of it that the migrations made.
func (r testRoles) checkOwnership(t *testing.T, url string) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx) // before the database is copied
	rows, err := c.Query(ctx, `SELECT c.relname, c.relowner::regrole::text FROM pg_class c
		WHERE c.relnamespace = 'nova'::regnamespace AND c.relkind IN ('r', 'S')
		UNION ALL SELECT 'schema nova', nspowner::regrole::text FROM pg_namespace WHERE nspname = 'nova'`)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Name, Owner string
	}])
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) < 20 {
		t.Fatalf("only %d objects in schema nova: %v", len(owners), owners)
	}
	for _, o := range owners {
		if o.Owner != r.migrate {
			t.Errorf("%s is owned by %s, not the migration role %s", o.Name, o.Owner, r.migrate)
		}
	}
}

// grantUnit is one privilege of the auditor role in the script: a verb on
// a table, or on one column of it, a sequence, the schema or the database.
type grantUnit struct {
	verb, column, kind, object string // kind: "", SEQUENCE, SCHEMA or DATABASE
}

func (u grantUnit) String() string {
	if u.kind == "DATABASE" {
		return u.verb + " ON DATABASE (the auditor's)"
	}
	s := u.verb
	if u.column != "" {
		s += " (" + u.column + ")"
	}
	s += " ON "
	if u.kind != "" {
		s += u.kind + " "
	}
	return s + u.object
}

// deniedOn is what Postgres's permission denied names without the unit:
// "for table streams", "for sequence quarantine_id_seq", "for schema nova",
// "for database".
func (u grantUnit) deniedOn() string {
	kind := strings.ToLower(u.kind)
	if kind == "" {
		kind = "table"
	}
	if u.kind == "DATABASE" {
		return "for database"
	}
	return "for " + kind + " " + strings.TrimPrefix(u.object, "nova.")
}

// revoke is the statement that takes the unit from role in database db.
func (u grantUnit) revoke(role, db string) string {
	s := u.String()
	if u.kind == "DATABASE" {
		s = u.verb + " ON DATABASE " + pgx.Identifier{db}.Sanitize()
	}
	return "REVOKE " + s + " FROM " + role
}

var (
	grantStmt = regexp.MustCompile(`GRANT ((?:[A-Z]+(?: \([a-z_, ]+\))?(?:, )?)+) ON (?:(SEQUENCE|SCHEMA|DATABASE) )?(\S+) TO (\w+)`)
	grantVerb = regexp.MustCompile(`([A-Z]+)(?: \(([a-z_, ]+)\))?`)
)

// auditorGrants lists every privilege the script grants the auditor role:
// one unit per verb, and per column of a column list.
func auditorGrants(t *testing.T, script, role string) []grantUnit {
	var units []grantUnit
	for _, m := range grantStmt.FindAllStringSubmatch(script, -1) {
		if m[4] != role {
			continue
		}
		for _, v := range grantVerb.FindAllStringSubmatch(m[1], -1) {
			if v[2] == "" {
				units = append(units, grantUnit{verb: v[1], kind: m[2], object: m[3]})
				continue
			}
			for _, col := range strings.Split(v[2], ",") {
				units = append(units, grantUnit{verb: v[1], column: strings.TrimSpace(col), kind: m[2], object: m[3]})
			}
		}
	}
	if len(units) < 30 {
		t.Fatalf("only %d grants to %s found in %s", len(units), role, rolesScript)
	}
	return units
}

// hardenAndApply revokes the database's default grants to PUBLIC, as a
// hardened server does, and applies the script; it returns its notices.
func hardenAndApply(t *testing.T, url, script string) []string {
	execSQL(t, url, "REVOKE ALL ON DATABASE "+dbName(t, url)+" FROM PUBLIC")
	return applyScript(t, url, script)
}

// applyScript runs the script as the superuser, as psql -f would (one
// simple-protocol batch), and returns the notices it raised.
func applyScript(t *testing.T, url, script string) []string {
	notices, err := tryScript(t, url, script)
	if err != nil {
		t.Fatalf("apply %s: %v", rolesScript, err)
	}
	return notices
}

// tryScript is applyScript returning the script's error.
func tryScript(t *testing.T, url, script string) ([]string, error) {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if !strings.Contains(n.Message, "already exists, skipping") {
			notices = append(notices, n.Message)
		}
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, script)
	return notices, err
}

func execSQL(t *testing.T, url, stmt string) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func dbName(t *testing.T, url string) string {
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// dropDatabase drops the database at url (it may run in any goroutine: a
// failure is logged, and the database's cleanup drops it again).
func dropDatabase(t *testing.T, url string) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Logf("drop %s: %v", url, err)
		return
	}
	defer c.Close(ctx)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Logf("drop %s: %v", url, err)
		return
	}
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Logf("drop %s: %v", url, err)
	}
}

// roleURL is url with the user replaced (the test server trusts local
// connections: no password).
func roleURL(t *testing.T, url, role string) string {
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	return u.String()
}

// roleBucket is the store bucket of the role tests.
const roleBucket = "nova"

func newRoleStore(t *testing.T, root string) objstore.Store {
	st, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBucket(roleBucket); err != nil {
		t.Fatal(err)
	}
	return st
}

// copyTree copies the directory src into dst (created).
func copyTree(t *testing.T, src, dst string) {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o640)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// roleRun is one life of the star on a copy of the template database and
// store, run as the auditor role, with one grant revoked (or none).
type roleRun struct {
	revoke   grantUnit // zero: none
	su       string    // the copy's URL as the superuser (the write path, and the test's own reads)
	url      string    // the copy's URL as the auditor role
	root     string    // the store's root
	dataDir  string
	log      lockedBuffer // every command's output, in order
	commands int
	took     time.Duration
	err      error
}

// deniedError is a run stopped by a permission denied.
type deniedError struct {
	command string
	line    string
}

func (e *deniedError) Error() string { return e.command + ": " + e.line }

// newRoleRun copies the template database and store, reapplies the script
// to the copy (it keeps no grant on the database itself), revokes one unit
// (none when zero) and returns the run, ready to go.
func newRoleRun(t *testing.T, roles testRoles, tmplURL, tmplRoot, script string, revoke grantUnit) *roleRun {
	su := testenv.CloneDatabase(t, tmplURL)
	if n := hardenAndApply(t, su, script); len(n) != 0 {
		t.Fatalf("the script on a copy: %q", n)
	}
	r := &roleRun{revoke: revoke, su: su, url: roleURL(t, su, roles.auditor), root: filepath.Join(t.TempDir(), "store"), dataDir: t.TempDir()}
	if revoke != (grantUnit{}) {
		execSQL(t, su, revoke.revoke(roles.auditor, dbName(t, su)))
	}
	copyTree(t, tmplRoot, r.root)
	return r
}

// lockedBuffer is a buffer that commands running in goroutines (serve)
// write to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// flags are the configuration of every command of the run.
func (r *roleRun) flags() []string {
	return []string{"--star", "s1", "--database-url", r.url, "--fs-root", r.root, "--bucket", roleBucket,
		"--data-dir", r.dataDir, "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--reap-grace", "1h", "--denorm-output-cap-mib", "1",
		"--denorm-chunk-target-kib", "64", "--reap-batch-size", "1", "--log-level", "debug"}
}

// cli runs one auditor command as the auditor role. A permission denied in
// its output ends the run (deniedError); so does an exit code other than
// want.
func (r *roleRun) cli(ctx context.Context, want int, args ...string) (string, error) {
	var out, errs lockedBuffer
	e := env{stdout: &out, stderr: &errs, getenv: func(string) string { return "" }}
	code := dispatch(ctx, e, append(args, r.flags()...))
	return r.done(args, code, want, out.String(), errs.String())
}

func (r *roleRun) done(args []string, code, want int, out, errs string) (string, error) {
	r.commands++
	fmt.Fprintf(&r.log, "$ auditor %s → exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	for _, line := range strings.Split(out+errs, "\n") {
		if strings.Contains(line, denied) {
			return out, &deniedError{command: strings.Join(args, " "), line: line}
		}
	}
	if code != want {
		return out, fmt.Errorf("auditor %s: exit %d, want %d: %s %s", strings.Join(args, " "), code, want, out, errs)
	}
	return out, nil
}

// scenario is the star's life (TestLeastPrivilegeRoles). The write path
// and the test's checks run as the superuser; every auditor command as the
// auditor role.
func (r *roleRun) scenario(ctx context.Context) (err error) {
	start := time.Now()
	defer func() { r.took = time.Since(start) }()
	db, err := catalog.Open(ctx, r.su)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := filestore.New(objstore.FileConfig{Root: r.root})
	if err != nil {
		return err
	}
	wp := writepath.New(db)

	if _, err := r.cli(ctx, exitOK, "status"); err != nil {
		return err
	}
	// Settle everything written so far: several objects for some streams
	// (the output cap), so a commit leaves refs behind and moves the due
	// marker; trim releases the slots and arms their reap.
	if _, err := r.cli(ctx, exitOK, "run", "--once"); err != nil {
		return err
	}
	streams, err := db.Streams().StreamsOfStar(ctx, "s1")
	if err != nil {
		return err
	}
	entries := map[catalog.StreamID][]catalog.Entry{}
	for _, st := range streams {
		if st.SettledThrough != st.NextRecord {
			return fmt.Errorf("stream %s settled through %d of %d after the first cycle", st.ID, st.SettledThrough, st.NextRecord)
		}
		if entries[st.ID], err = db.Streams().EntriesOfStream(ctx, st.ID); err != nil {
			return err
		}
	}
	// The streams with the most objects: a erases, b's retention moves,
	// c is quarantined and released.
	slices.SortStableFunc(streams, func(x, y catalog.Stream) int { return len(entries[y.ID]) - len(entries[x.ID]) })
	a, b, c := streams[0], streams[1], streams[2]
	if len(entries[a.ID]) < 2 || len(entries[b.ID]) < 2 {
		return fmt.Errorf("too few objects to work on: %d and %d", len(entries[a.ID]), len(entries[b.ID]))
	}
	erased := entries[a.ID][0]
	if _, err := r.cli(ctx, exitOK, "erase", "--stream", a.ID.String(), "--from", fmt.Sprint(erased.FirstRecord+1), "--count", "2"); err != nil {
		return err
	}
	retired := entries[b.ID][0]
	gone := []string{
		bundlefmt.SettledKey(a.Bucket, a.ID, uint64(erased.Epoch), uint64(erased.FirstRecord), uint32(erased.Revision)),
		bundlefmt.SettledKey(b.Bucket, b.ID, uint64(retired.Epoch), uint64(retired.FirstRecord), uint32(retired.Revision)),
	}

	// More traffic from two new writers, each fencing its predecessor:
	// tails to rewrite, and the next slot range spans three epochs. Then
	// the write path's retention over b's first object.
	for session := uint64(2); session <= 3; session++ {
		if err := r.write(ctx, db, store, session); err != nil {
			return err
		}
	}
	if err := wp.RaiseLowRecord(ctx, b.ID, retired.FirstRecord+retired.RecordCount); err != nil {
		return err
	}
	// Settle (rewrites), retention, the erase step's rewrite, trim.
	if _, err := r.cli(ctx, exitOK, "run", "--once"); err != nil {
		return err
	}
	// Past the grace, with the third epoch's slots undeletable (a loop
	// where their directory was): the first range is reaped whole, the
	// second one only up to the third epoch (its first waves of deletes
	// are the first two epochs' slots), which moves its start.
	if err := wp.SkipGrace(ctx, "s1", time.Hour); err != nil {
		return err
	}
	reaps, err := db.Trim().SlotReaps(ctx, "s1")
	if err != nil || len(reaps) != 2 || reaps[1].From != (catalog.SlotPos{Epoch: 1, Seq: 12}) || reaps[1].To.Epoch != 3 {
		return fmt.Errorf("slot reaps before the grace ends: %+v %v (want the second from 1/12 into epoch 3)", reaps, err)
	}
	chain3 := filepath.Dir(filepath.Join(r.root, roleBucket, filepath.FromSlash(bundlefmt.SlotKey("s1", 3, 0))))
	if err := os.Rename(chain3, chain3+".aside"); err != nil {
		return err
	}
	if err := os.Symlink(filepath.Base(chain3), chain3); err != nil {
		return err
	}
	if _, err := r.cli(ctx, exitOK, "run", "--once"); err != nil {
		return err
	}
	if err := os.Remove(chain3); err != nil {
		return err
	}
	if err := os.Rename(chain3+".aside", chain3); err != nil {
		return err
	}
	if reaps, err = db.Trim().SlotReaps(ctx, "s1"); err != nil || len(reaps) != 1 || reaps[0].From.Epoch < 2 || reaps[0].From == reaps[0].To {
		return fmt.Errorf("slot reaps after a partly failed reap: %+v %v (want one, its start moved past the first epoch)", reaps, err)
	}

	// A broken ref of c in new traffic: the next cycle quarantines c and
	// reaps the rest of the range, the superseded revision and the retired
	// object; the one after applies the erasure.
	if err := r.write(ctx, db, store, 4); err != nil {
		return err
	}
	refs, err := writepath.New(db).RefsOfStream(ctx, c.ID)
	if err != nil {
		return err
	}
	if len(refs) == 0 {
		return fmt.Errorf("stream %s got no new records", c.ID)
	}
	if err := wp.ShiftRefWindow(ctx, c.ID, refs[0].FirstRecord, 1); err != nil {
		return err
	}
	for range 2 {
		if _, err := r.cli(ctx, exitOK, "run", "--once"); err != nil {
			return err
		}
	}
	if q, err := db.Settle().Quarantined(ctx, "s1"); err != nil || len(q) != 1 || *q[0].Stream != c.ID {
		return fmt.Errorf("quarantine after the broken ref: %+v %v (want stream %s)", q, err, c.ID)
	}
	if err := wp.ShiftRefWindow(ctx, c.ID, refs[0].FirstRecord, -1); err != nil {
		return err
	}
	if reaps, err := db.Trim().SlotReaps(ctx, "s1"); err != nil || len(reaps) != 1 || reaps[0].Due {
		return fmt.Errorf("slot reaps after the cycle past the grace: %+v %v (want only the new one, not due)", reaps, err)
	}
	ers, err := db.Erasures().ErasuresOf(ctx, a.ID, 0, 1<<62)
	if err != nil || len(ers) != 1 || !ers[0].Applied {
		return fmt.Errorf("the erasure of %s: %+v %v (want applied)", a.ID, ers, err)
	}
	ents, err := db.Streams().EntriesOfStream(ctx, a.ID)
	if err != nil || len(ents) == 0 || ents[0].FirstRecord != erased.FirstRecord || ents[0].Revision <= erased.Revision {
		return fmt.Errorf("the erased object of %s: %+v %v (want a revision above %d)", a.ID, ents, err, erased.Revision)
	}
	for _, key := range gone {
		p, err := store.Path(roleBucket, key)
		if err != nil {
			return err
		}
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s is not reaped: %v", key, err)
		}
	}
	runs, err := db.Ledger().LastRuns(ctx, "s1", 100)
	if err != nil {
		return err
	}
	var slots, objects int64
	for _, run := range runs {
		slots += run.Counts.SlotsReaped
		objects += run.Counts.ObjectsReaped
	}
	if slots == 0 || objects < 2 {
		return fmt.Errorf("reaped %d slots and %d objects (want some, and both keys)", slots, objects)
	}

	// The operator's requests, then the daemon that consumes them.
	for _, args := range [][]string{{"release", "--stream", c.ID.String()}, {"pause"}, {"resume"}, {"trigger"}} {
		if _, err := r.cli(ctx, exitOK, args...); err != nil {
			return err
		}
	}
	if err := r.serve(ctx, db); err != nil {
		return err
	}
	if st, err := db.Streams().Stream(ctx, c.ID); err != nil || st.SettledThrough != st.NextRecord {
		return fmt.Errorf("the released stream after serve: %+v %v (want settled)", st, err)
	}

	if err := r.serveFleet(ctx, db); err != nil {
		return err
	}
	if _, err := r.cli(ctx, exitOK, "status"); err != nil {
		return err
	}
	out, err := r.cli(ctx, exitOK, "verify")
	if err != nil {
		return err
	}
	if !regexp.MustCompile(`verified [1-9][0-9]* objects .*: 0 findings`).MatchString(out) {
		return fmt.Errorf("verify: %q", out)
	}
	// reconcile on a healthy star: it reads every stream and the store,
	// takes the lease and changes nothing.
	if out, err = r.cli(ctx, exitOK, "reconcile", "--apply"); err != nil {
		return err
	}
	if !strings.Contains(out, "changed 0;") {
		return fmt.Errorf("reconcile --apply of a healthy star: %q", out)
	}
	_, err = r.cli(ctx, exitOK, "doctor")
	return err
}

// serveFleet runs `auditor serve --stars all` as a fleet member until it
// leads s1 and has run a trigger there, then drains it as SIGTERM would:
// the member's heartbeat, claim (and its move), renewal, hand-off and
// leave, and its star's daemon, all as the auditor role.
func (r *roleRun) serveFleet(ctx context.Context, db *catalog.DB) error {
	if _, err := r.cli(ctx, exitOK, "trigger"); err != nil {
		return err
	}
	flags := slices.Delete(slices.Clone(r.flags()), 0, 2) // --star s1
	args := []string{"serve", "--stars", "all", "--holder", "rolesfleet", "--http-addr", "127.0.0.1:0", "--lease-ttl", "2s",
		"--lease-renew", "500ms", "--schedule", "@every 1h", "--start-checks=false"}
	err := r.serveUntil(ctx, args, flags, func() (bool, string, error) {
		open, err := db.Requests().AdminRequests(ctx, "s1", true, 100)
		if err != nil {
			return false, "", err
		}
		l, live, err := db.Leases().CurrentLease(ctx, "s1")
		if err != nil {
			return false, "", err
		}
		return len(open) == 0 && live && l.Holder == "rolesfleet",
			fmt.Sprintf("the fleet member did not lead s1 and run its trigger (open: %+v, lease %+v)", open, l), nil
	})
	if err != nil {
		return err
	}
	moves, err := db.Fleet().FleetMoves(ctx, time.Hour, 10)
	if err != nil || len(moves) == 0 || moves[0].To != "rolesfleet" {
		return fmt.Errorf("the fleet member's claim is not in the move log: %+v %v", moves, err)
	}
	if l, live, err := db.Leases().CurrentLease(ctx, "s1"); err != nil || live {
		return fmt.Errorf("the drained member kept s1: %+v live %v, %v", l, live, err)
	}
	return nil
}

// write is the write path's traffic of one session (a new writer: it
// fences the star's epoch).
func (r *roleRun) write(ctx context.Context, db *catalog.DB, store objstore.Store, session uint64) error {
	_, err := sim.Write(ctx, db, sim.Storage{Store: store, Standard: roleBucket}, sim.WriteOptions{Star: "s1", Flights: 6,
		FlightBytes: 256 << 10, FlightInterval: time.Minute, Session: session})
	return err
}

// serve runs `auditor serve --run-now` until it has consumed every admin
// request, run the trigger, and recorded its runtime and the bucket rules;
// then it stops it as SIGTERM would.
func (r *roleRun) serve(ctx context.Context, db *catalog.DB) error {
	args := []string{"serve", "--run-now", "--holder", "roles", "--http-addr", "127.0.0.1:0", "--lease-ttl", "2s", "--lease-renew", "500ms",
		"--schedule", "@every 1h"}
	err := r.serveUntil(ctx, args, r.flags(), func() (bool, string, error) {
		open, err := db.Requests().AdminRequests(ctx, "s1", true, 100)
		if err != nil {
			return false, "", err
		}
		rt, err := db.Ledger().Runtime(ctx, "s1")
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			return false, "", err
		}
		return len(open) == 0 && rt.BucketCheckedAt != nil && rt.Holder == "roles",
			fmt.Sprintf("serve did not consume the requests (open: %+v) or record its runtime (%+v)", open, rt), nil
	})
	if err != nil {
		return err
	}
	reqs, err := db.Requests().AdminRequests(ctx, "s1", false, 100)
	if err != nil {
		return err
	}
	for _, q := range reqs {
		if q.Kind == catalog.AdminTrigger && q.Outcome != catalog.TriggerDone {
			return fmt.Errorf("the trigger: %+v (want done)", q)
		}
	}
	return nil
}

// serveUntil runs `auditor` args plus flags in this process until done
// says it is done (or a permission denied shows in its output, or a
// minute passes: the error done described), then stops it as SIGTERM
// would and checks it exited 0 without a permission denied.
func (r *roleRun) serveUntil(ctx context.Context, args, flags []string, done func() (bool, string, error)) error {
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var out, errs lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- dispatch(sctx, env{stdout: &out, stderr: &errs, getenv: func(string) string { return "" }}, append(args, flags...))
	}()
	var waited error
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String()+errs.String(), denied) {
		ok, what, err := done()
		if err != nil {
			stop()
			<-code
			return err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			waited = errors.New(what)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	c := <-code
	if _, err := r.done(args, c, exitOK, out.String(), errs.String()); err != nil {
		return err
	}
	return waited
}
