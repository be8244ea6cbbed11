package main

import (
	"bufio"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
)

func scaleInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestScaleStar is `make bench-scale`'s one star of production shape, built
// with generate_series and written slots in minutes, not by simulation:
// NOVA_SCALE_STREAMS idle streams (100,000), one stream with
// NOVA_SCALE_ENTRIES catalog entries (10^6), a year of 30-second cycles in
// the ledger (NOVA_SCALE_RUNS, 1,051,200) and its admin requests,
// NOVA_SCALE_DUE small due streams (10,000) and one hot stream with a
// NOVA_SCALE_BACKLOG-record backlog (10^7, 100-byte records: 1 GB of
// slots). It runs `auditor run --once` on the file backend twice (the
// backlog, then an idle cycle) and reports, per cycle: wall time, time per
// step, the process's peak RSS (getrusage), Postgres transactions per
// settled object (pg_stat_database) and objects settled. It asserts only
// what cannot be noise: every due stream settled, nothing quarantined.
// Skipped unless NOVA_BENCH_SCALE=1.
func TestScaleStar(t *testing.T) {
	if os.Getenv("NOVA_BENCH_SCALE") != "1" {
		t.Skip("the scale benchmark: make bench-scale")
	}
	var (
		streams = scaleInt("NOVA_SCALE_STREAMS", 100_000)
		entries = scaleInt("NOVA_SCALE_ENTRIES", 1_000_000)
		runs    = scaleInt("NOVA_SCALE_RUNS", 1_051_200)
		due     = scaleInt("NOVA_SCALE_DUE", 10_000)
		backlog = scaleInt("NOVA_SCALE_BACKLOG", 10_000_000)
	)
	ctx := context.Background()
	bin := auditorBinary(t)
	url := testenv.FreshDatabase(t)
	if code, out, errs := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	db, err := catalog.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	built := time.Now()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, q := range []string{
		`INSERT INTO nova.streams (stream_id, star, bucket, class)
			SELECT md5('idle' || i)::uuid, 's1', 'b0', 'standard' FROM generate_series(1, ` + strconv.Itoa(streams) + `) i`,
		`INSERT INTO nova.streams (stream_id, star, bucket, class, next_record, settled_through)
			VALUES (md5('history')::uuid, 's1', 'b0', 'standard', ` + strconv.Itoa(entries) + `, ` + strconv.Itoa(entries) + `)`,
		`INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes, footer_offset, footer_length, min_timestamp, max_timestamp)
			SELECT md5('history')::uuid, 1, i, 0, 1, 200, 100, 60, 0, 0 FROM generate_series(0, ` + strconv.Itoa(entries-1) + `) i`,
		`INSERT INTO nova.auditor_runs (star, holder, token, trigger, started_at, ended_at, outcome, objects_published)
			SELECT 's1', 'old', 1, 'schedule', now() - i * interval '30 seconds', now() - i * interval '30 seconds' + interval '2 seconds', 'ok', 3
			FROM generate_series(1, ` + strconv.Itoa(runs) + `) i`,
		`INSERT INTO nova.admin_requests (star, kind, requested_at, consumed_at, consumed_by)
			SELECT 's1', 'trigger', now() - i * interval '1 hour', now() - i * interval '1 hour', 'old' FROM generate_series(1, 8760) i`,
		`ANALYZE`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("build the history: %v\n%s", err, q)
		}
	}
	root := t.TempDir()
	store, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateBucket("std"); err != nil {
		t.Fatal(err)
	}
	seq := 0
	flight := func(chunks []bundlefmt.Chunk, batches []writepath.AbsorbBatch) {
		t.Helper()
		obj, err := bundlefmt.EncodeFlight(1, uint64(seq), 3, chunks)
		if err != nil {
			t.Fatal(err)
		}
		key := bundlefmt.SlotKey("s1", 1, uint64(seq))
		if err := store.PutIfAbsent(ctx, "std", key, obj); err != nil {
			t.Fatal(err)
		}
		f, err := bundlefmt.OpenObjectFooter(key, obj, bundlefmt.EnvelopeSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: int64(seq),
			FooterOffset: int64(f.FooterOffset()), FooterLength: int64(f.FooterLength()), Batches: batches}}); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	r := rand.New(rand.NewPCG(5, 6))
	body := make([]byte, 100)
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	// The small due streams: two flights, two records each.
	small := make([]bundlefmt.StreamID, due)
	for i := range small {
		small[i] = bundlefmt.StreamID{0: 0x5a, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)}
		if err := writepath.New(db).CreateStream(ctx, small[i], "s1", "b0"); err != nil {
			t.Fatal(err)
		}
	}
	for f := 0; f < 2; f++ {
		var chunks []bundlefmt.Chunk
		var batches []writepath.AbsorbBatch
		for _, id := range small {
			cb := bundlefmt.NewChunkBuilder(id, uint64(2*f))
			for j := 0; j < 2; j++ {
				if err := cb.Add(bundlefmt.Record{Body: body[:60]}, 1_700_000_000_000, j == 1); err != nil {
					t.Fatal(err)
				}
			}
			chunks = append(chunks, cb.Chunk())
			batches = append(batches, writepath.AbsorbBatch{Stream: id, FirstRecord: int64(2 * f), Count: 2})
		}
		flight(chunks, batches)
	}
	// The hot stream's backlog.
	hot := bundlefmt.StreamID{0: 0x40, 15: 1}
	if err := writepath.New(db).CreateStream(ctx, hot, "s1", "b0"); err != nil {
		t.Fatal(err)
	}
	for first := 0; first < backlog; {
		n := min(20_000, backlog-first)
		cb := bundlefmt.NewChunkBuilder(hot, uint64(first))
		for j := 0; j < n; j++ {
			body[j%len(body)] ^= byte(j)
			if err := cb.Add(bundlefmt.Record{Body: body}, int64(1_700_000_000_000+first+j), j == n-1); err != nil {
				t.Fatal(err)
			}
		}
		flight([]bundlefmt.Chunk{cb.Chunk()}, []writepath.AbsorbBatch{{Stream: hot, FirstRecord: int64(first), Count: int64(n)}})
		first += n
	}
	t.Logf("built: %d idle streams, %d catalog entries in one stream, %d ledger rows, %d due small streams, a %d-record backlog in %d slots, in %s",
		streams, entries, runs, due, backlog, seq, time.Since(built).Round(time.Second))

	for i, what := range []string{"backlog", "idle"} {
		before := dbTransactions(t, url)
		cmd := exec.Command(bin, "run", "--once", "--star", "s1", "--database-url", url, "--fs-root", root, "--bucket", "std",
			"--data-dir", filepath.Join(root, "data"), "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--log-format", "json", "--log-level", "info",
			"--lease-ttl", "30m", "--lease-renew", "10m", "--settle-max-streams", strconv.Itoa(due+10))
		cmd.Env = append(os.Environ(), "GOMEMLIMIT="+os.Getenv("NOVA_SCALE_GOMEMLIMIT"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cycle %d (%s): %v\n%s", i, what, err, tail(out))
		}
		txs := dbTransactions(t, url) - before
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		line := cycleLine(t, out)
		objects := line.Counts.ObjectsPublished + line.Counts.ObjectsAdopted
		per := 0.0
		if objects > 0 {
			per = float64(txs) / float64(objects)
		}
		t.Logf("cycle %d (%s): %.1f s; steps %v; peak RSS %.0f MiB; %d objects, %d streams settled, %d quarantined; %d Postgres transactions (%.2f per object)",
			i, what, line.Duration, line.StepSeconds, float64(ru.Maxrss)/1024, objects, line.Counts.StreamsSettled,
			line.Counts.StreamsQuarantined, txs, per)
		if i == 0 && (line.Counts.StreamsSettled != int64(due+1) || line.Counts.StreamsQuarantined != 0) {
			t.Fatalf("settled %d of %d due streams, %d quarantined", line.Counts.StreamsSettled, due+1, line.Counts.StreamsQuarantined)
		}
	}
}

type cycleLog struct {
	Duration    float64            `json:"duration"`
	StepSeconds map[string]float64 `json:"step_seconds"`
	Counts      struct {
		StreamsSettled     int64 `json:"streams_settled"`
		StreamsQuarantined int64 `json:"streams_quarantined"`
		ObjectsPublished   int64 `json:"objects_published"`
		ObjectsAdopted     int64 `json:"objects_adopted"`
	} `json:"counts"`
}

// cycleLine finds the cycle's log line in the process's JSON log.
func cycleLine(t *testing.T, out []byte) cycleLog {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var l struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "cycle" {
			var c cycleLog
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("no cycle line in the log:\n%s", tail(out))
	return cycleLog{}
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// dbTransactions is the server's count of the database's transactions,
// read from another database once no connection to it is left.
func dbTransactions(t *testing.T, url string) int64 {
	t.Helper()
	ctx := context.Background()
	name := url[strings.LastIndex(url, "/")+1:]
	if i := strings.IndexByte(name, '?'); i >= 0 {
		name = name[:i]
	}
	c, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	last := int64(-1)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		if _, err := c.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		var others int
		if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = $1),
			(SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1)`, name).Scan(&others, &n); err != nil {
			t.Fatal(err)
		}
		if n == last {
			return n
		}
		last = n
	}
	return last
}
