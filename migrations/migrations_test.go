package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/migrations"
)

// contract lists every table and column of docs/metastore.md (the normative
// names), with the Postgres data type each must have.
var contract = map[string]map[string]string{
	"stars":       {"star": "text", "chain_class": "text", "epoch": "bigint", "next_seq": "bigint", "fence_window": "integer"},
	"star_epochs": {"star": "text", "epoch": "bigint", "started_at": "timestamp with time zone", "end_seq": "bigint"},
	"streams": {"stream_id": "uuid", "star": "text", "bucket": "text", "epoch": "bigint", "class": "text",
		"next_record": "bigint", "low_record": "bigint", "settled_through": "bigint"},
	"span_refs": {"stream_id": "uuid", "first_record": "bigint", "record_count": "bigint", "star": "text", "class": "text",
		"slot_epochs": "ARRAY", "slot_seqs": "ARRAY", "footer_offsets": "ARRAY", "footer_lengths": "ARRAY",
		"absorbed_at": "timestamp with time zone"},
	"due_markers": {"stream_id": "uuid", "class": "text", "since": "timestamp with time zone"},
	"erasures": {"stream_id": "uuid", "first_record": "bigint", "record_count": "bigint",
		"requested_at": "timestamp with time zone", "applied_at": "timestamp with time zone"},
	"catalog": {"stream_id": "uuid", "epoch": "bigint", "first_record": "bigint", "revision": "integer",
		"record_count": "bigint", "object_bytes": "bigint", "footer_offset": "bigint", "footer_length": "bigint",
		"min_timestamp": "bigint", "max_timestamp": "bigint", "class": "text", "settled_at": "timestamp with time zone"},
	"orphan_intents": {"id": "bigint", "star": "text", "kind": "text", "object_key": "text", "class": "text",
		"upload_id": "text", "staged_parts": "ARRAY", "created_at": "timestamp with time zone", "reap_after": "timestamp with time zone"},
	"trim_cursors": {"star": "text", "epoch": "bigint", "seq": "bigint", "updated_at": "timestamp with time zone"},
	"slot_reaps": {"id": "bigint", "star": "text", "from_epoch": "bigint", "from_seq": "bigint",
		"to_epoch": "bigint", "to_seq": "bigint", "reap_after": "timestamp with time zone"},
	"auditor_leases": {"star": "text", "holder": "text", "token": "bigint", "expires_at": "timestamp with time zone"},
	"auditor_runs":   {},
	"admin_requests": {},
	"quarantine":     {},
}

func connect(t *testing.T) (*pgx.Conn, context.Context) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.FreshDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, ctx
}

func TestEmbeddedMigrationsAreDense(t *testing.T) {
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || migrations.Latest() != len(all) {
		t.Fatalf("Latest() = %d with %d migrations", migrations.Latest(), len(all))
	}
}

func TestUpCreatesTheContract(t *testing.T) {
	t.Parallel()
	conn, ctx := connect(t)
	if v, err := migrations.Version(ctx, conn); err != nil || v != 0 {
		t.Fatalf("empty database: version %d, %v", v, err)
	}
	if err := migrations.Check(ctx, conn); !errors.Is(err, migrations.ErrDatabaseBehind) {
		t.Fatalf("Check on empty database = %v, want ErrDatabaseBehind", err)
	}
	applied, err := migrations.Up(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != migrations.Latest() {
		t.Fatalf("applied %v, want all %d", applied, migrations.Latest())
	}
	rows, err := conn.Query(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'nova'`)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]map[string]string{}
	for rows.Next() {
		var tbl, col, typ string
		if err := rows.Scan(&tbl, &col, &typ); err != nil {
			t.Fatal(err)
		}
		if have[tbl] == nil {
			have[tbl] = map[string]string{}
		}
		have[tbl][col] = typ
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for tbl, cols := range contract {
		if have[tbl] == nil {
			t.Errorf("table nova.%s missing", tbl)
			continue
		}
		for col, typ := range cols {
			if got, ok := have[tbl][col]; !ok {
				t.Errorf("column nova.%s.%s missing", tbl, col)
			} else if got != typ {
				t.Errorf("column nova.%s.%s has type %s, want %s", tbl, col, got, typ)
			}
		}
	}
	// The indexes docs/architecture.md's queries need.
	var idx []string
	irows, err := conn.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = 'nova'`)
	if err != nil {
		t.Fatal(err)
	}
	for irows.Next() {
		var n string
		if err := irows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		idx = append(idx, n)
	}
	sort.Strings(idx)
	for _, want := range []string{"due_markers_since_idx", "span_refs_first_slot_idx", "span_refs_pkey", "orphan_intents_kind_idx", "orphan_intents_publish_key_idx",
		"orphan_intents_reap_key_idx"} {
		if !slices.Contains(idx, want) {
			t.Errorf("index %s missing; have %v", want, idx)
		}
	}
	if slices.Contains(idx, "orphan_intents_key_idx") {
		t.Errorf("orphan_intents_key_idx still there after 0011; have %v", idx)
	}
	if err := migrations.Check(ctx, conn); err != nil {
		t.Fatalf("Check after Up: %v", err)
	}
}

func TestUpTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	conn, ctx := connect(t)
	if _, err := migrations.Up(ctx, conn); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		var s string
		err := conn.QueryRow(ctx, `SELECT string_agg(table_name || '.' || column_name || ':' || data_type, ',' ORDER BY table_name, column_name)
			FROM information_schema.columns WHERE table_schema = 'nova'`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM nova.schema_migrations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return s + "#" + strconv.Itoa(n)
	}
	before := snapshot()
	applied, err := migrations.Up(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Fatalf("second Up applied %v", applied)
	}
	if after := snapshot(); after != before {
		t.Fatalf("second Up changed the schema:\n%s\n%s", before, after)
	}
}

func TestNewerDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	conn, ctx := connect(t)
	if _, err := migrations.Up(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO nova.schema_migrations (version, name) VALUES ($1, 'from_the_future')`, migrations.Latest()+1); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, conn); !errors.Is(err, migrations.ErrDatabaseNewer) {
		t.Fatalf("Up on a newer database = %v, want ErrDatabaseNewer", err)
	}
	if err := migrations.Check(ctx, conn); !errors.Is(err, migrations.ErrDatabaseNewer) {
		t.Fatalf("Check on a newer database = %v, want ErrDatabaseNewer", err)
	}
}

func TestConcurrentUpAppliesOnce(t *testing.T) {
	t.Parallel()
	url := testenv.FreshDatabase(t)
	ctx := context.Background()
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(ctx)
			_, err = migrations.Up(ctx, c)
			errs <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Up: %v", err)
		}
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM nova.schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != migrations.Latest() {
		t.Fatalf("%d version rows, want %d", n, migrations.Latest())
	}
}

// TestKeyRevisionsBackfill: migration 0007 starts every key base's
// high-water revision at the highest revision in use: one above the
// catalog's, every intent's whose key is a settled key (of any kind), 0 at
// each stream's settled_through, and nothing for keys that are not
// settled keys.
func TestKeyRevisionsBackfill(t *testing.T) {
	conn, ctx := connect(t)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var m7 migrations.Migration
	for _, m := range all {
		if m.Version == 7 {
			m7 = m
			break
		}
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
	}
	const (
		a = "0123456789abcdef0123456789abcdef"
		b = "fedcba9876543210fedcba9876543210"
	)
	key := func(stream string, first, rev int) string {
		return fmt.Sprintf("buckets/b1/streams/%s/%020d/%020d~%d", stream, 1, first, rev)
	}
	if _, err := conn.Exec(ctx, `
		INSERT INTO nova.stars (star, chain_class) VALUES ('s1', 'standard');
		INSERT INTO nova.streams (stream_id, star, bucket, class, next_record, settled_through)
			VALUES ('`+a+`', 's1', 'b1', 'standard', 30, 20), ('`+b+`', 's1', 'b1', 'standard', 0, 0);
		INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes, footer_offset, footer_length, min_timestamp, max_timestamp)
		VALUES ('`+a+`', 1, 0, 2, 10, 1, 1, 1, 0, 0), ('`+a+`', 1, 10, 0, 10, 1, 1, 1, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	for _, in := range []struct{ kind, key string }{
		{"reap", key(a, 0, 1)},    // below the catalog's revision
		{"publish", key(a, 0, 3)}, // a rewrite in flight above it
		{"reap", key(a, 20, 0)},   // an abandoned new entry
		{"publish", key(b, 5, 4)}, // another stream
		{"reap", "not/a/settled/key~9"},
	} {
		if _, err := conn.Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class) VALUES ('s1', $1, $2, 'standard')`, in.kind, in.key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, m7.SQL); err != nil {
		t.Fatalf("migration 7: %v", err)
	}
	rows, err := conn.Query(ctx, `SELECT replace(stream_id::text, '-', ''), epoch, first_record, high_revision
		FROM nova.auditor_key_revisions ORDER BY 1, 3`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		var e, f int64
		var r int32
		if err := rows.Scan(&s, &e, &f, &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%d/%d~%d", s[:4], e, f, r))
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	// One revision of headroom above each cataloged one (a rewrite the old
	// binary may have given up and deleted: 10~1), and revision 0 at each
	// stream's settled_through (a new run: 20~0 with a's reap, 0~0 for b).
	want := []string{"0123/1/0~3", "0123/1/10~1", "0123/1/20~0", "fedc/1/0~0", "fedc/1/5~4"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("high-water revisions %v, want %v", got, want)
	}
}

// TestGapKeyRevisionsBackfill: migration 0014 reserves revision 0 of every
// base a new run may start at inside a retention gap: each record of the
// span ref holding low_record above settled_through and up to
// low_record, or the ref's first record alone when the ref names one
// slot. It leaves streams without a gap, a gap with no ref holding
// low_record, and an existing row alone.
func TestGapKeyRevisionsBackfill(t *testing.T) {
	conn, ctx := connect(t)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var m14 migrations.Migration
	for _, m := range all {
		if m.Version == 14 {
			m14 = m
			break
		}
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
	}
	if m14.Version != 14 {
		t.Fatal("no migration 14")
	}
	type stream struct {
		id                   string
		settled, low, next   int64
		refs                 [][3]int64 // first record, record count, slots
		existing, existingAt int32
	}
	id := func(n int) string { return fmt.Sprintf("%032x", n) }
	streams := []stream{
		{id: id(1), settled: 10, low: 25, next: 40, refs: [][3]int64{{10, 10, 1}, {20, 20, 2}}}, // 20..25
		{id: id(2), settled: 0, low: 5, next: 30, refs: [][3]int64{{0, 30, 1}}},                 // its one chunk starts at settled_through: 0007's
		{id: id(3), settled: 5, low: 12, next: 20, refs: [][3]int64{{5, 5, 1}, {10, 10, 1}}},    // one slot: 10 alone
		{id: id(4), settled: 20, low: 10, next: 30, refs: [][3]int64{{20, 10, 3}}},              // no gap
		{id: id(5), settled: 0, low: 50, next: 40, refs: [][3]int64{{0, 40, 3}}},                // every record dead
		{id: id(6), settled: 10, low: 15, next: 30, refs: [][3]int64{{0, 30, 3}}},               // partly settled: 11..15
		{id: id(7), settled: 0, low: 3, next: 9, refs: [][3]int64{{0, 9, 2}}, existing: 4, existingAt: 2},
	}
	if _, err := conn.Exec(ctx, `INSERT INTO nova.stars (star, chain_class) VALUES ('s1', 'standard')`); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		if _, err := conn.Exec(ctx, `INSERT INTO nova.streams (stream_id, star, bucket, class, next_record, low_record, settled_through)
			VALUES ($1, 's1', 'b1', 'standard', $2, $3, $4)`, s.id, s.next, s.low, s.settled); err != nil {
			t.Fatal(err)
		}
		for _, r := range s.refs {
			slots := make([]int64, r[2])
			if _, err := conn.Exec(ctx, `INSERT INTO nova.span_refs (stream_id, first_record, record_count, star, class,
				slot_epochs, slot_seqs, footer_offsets, footer_lengths) VALUES ($1, $2, $3, 's1', 'standard', $4, $4, $4, $4)`,
				s.id, r[0], r[1], slots); err != nil {
				t.Fatal(err)
			}
		}
		if s.existing > 0 {
			if _, err := conn.Exec(ctx, `INSERT INTO nova.auditor_key_revisions (stream_id, epoch, first_record, high_revision)
				VALUES ($1, 1, $2, $3)`, s.id, s.existingAt, s.existing); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := conn.Exec(ctx, m14.SQL); err != nil {
		t.Fatalf("migration 14: %v", err)
	}
	rows, err := conn.Query(ctx, `SELECT replace(stream_id::text, '-', ''), epoch, first_record, high_revision
		FROM nova.auditor_key_revisions ORDER BY 1, 3`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for rows.Next() {
		var s string
		var e, f int64
		var r int32
		if err := rows.Scan(&s, &e, &f, &r); err != nil {
			t.Fatal(err)
		}
		got[s] = append(got[s], fmt.Sprintf("%d/%d~%d", e, f, r))
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	want := map[string][]string{
		id(1): {"1/20~0", "1/21~0", "1/22~0", "1/23~0", "1/24~0", "1/25~0"},
		id(3): {"1/10~0"},
		id(6): {"1/11~0", "1/12~0", "1/13~0", "1/14~0", "1/15~0"},
		id(7): {"1/1~0", "1/2~4", "1/3~0"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("high-water revisions after 0014:\n got %v\nwant %v", got, want)
	}
}
