package settle_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/migrations"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/verify"
)

// migrateThrough applies the embedded migrations up to version, recording
// each as the runner does: a database an older binary migrated.
func migrateThrough(ctx context.Context, db *catalog.DB, version int) error {
	all, err := migrations.All()
	if err != nil {
		return err
	}
	if _, err := db.Pool().Exec(ctx, `CREATE SCHEMA IF NOT EXISTS nova;
		CREATE TABLE IF NOT EXISTS nova.schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("version table: %w", err)
	}
	for _, m := range all[:version] {
		if _, err := db.Pool().Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migration %d: %w", m.Version, err)
		}
		if _, err := db.Pool().Exec(ctx, `INSERT INTO nova.schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return fmt.Errorf("record migration %d: %w", m.Version, err)
		}
	}
	return nil
}

// TestUpgradeAcrossARetentionGap: a database of a binary from before
// migration 0007 (no high-water revisions) holds a stream whose
// low_record retention raised past the first chunk of its first,
// unsettled multi-slot ref, so the stream's next run starts at the first
// live chunk f, above settled_through. That binary had published the run
// at (f, 0), condemned the key and sent its DELETE, and the reap finished:
// nothing in the metastore names the key. After `auditor migrate` the
// auditor publishes the run above revision 0, so the DELETE, landing only
// now, removes nothing the catalog references.
func TestUpgradeAcrossARetentionGap(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnvMigrated(t, b, 1, 0, sim.DefaultContent(7), func(ctx context.Context, db *catalog.DB) error {
				return migrateThrough(ctx, db, 6)
			})
			e.write("s1", 6, sim.Faults{}, 1) // absorbed three flights to a ref
			st := e.firstStream("s1")
			refs, err := writepath.New(e.db).RefsOfStream(e.ctx, st.ID)
			if err != nil || len(refs) == 0 || len(refs[0].Slots) < 2 || st.SettledThrough != 0 {
				t.Fatalf("want an unsettled multi-slot ref first: %+v %v (settled_through %d)", refs, err, st.SettledThrough)
			}
			// low_record one past the end of the ref's first chunk: the run
			// starts at that end, f.
			first := e.firstChunk(st.ID, refs[0])
			f := first.EndRecord()
			if err := writepath.New(e.db).RaiseLowRecord(e.ctx, st.ID, int64(f)+1); err != nil {
				t.Fatal(err)
			}
			condemned := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), f, 0)

			if _, err := e.db.Migrate(e.ctx); err != nil {
				t.Fatal(err)
			}
			c, err := e.cycle("s1", e.settler(nil))
			if err != nil {
				t.Fatal(err)
			}
			if c.StreamsQuarantined != 0 || c.ObjectsPublished == 0 {
				t.Fatalf("counts: %+v", c)
			}
			run := e.entryAt(st.ID, int64(f))
			if run.Revision < 1 {
				t.Errorf("the run at %d was published at revision %d: %s opened again", f, run.Revision, condemned)
			}
			// The old binary's DELETE lands.
			if err := e.store.Delete(e.ctx, e.std, []string{condemned}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				t.Fatal(err)
			}
			// Every live record reads back from what the catalog references
			// (the run starts above a gap, so checkSettled's tiling from 0
			// does not apply).
			if st := e.firstStream("s1"); st.SettledThrough != st.NextRecord {
				t.Fatalf("settled_through %d, next_record %d", st.SettledThrough, st.NextRecord)
			}
			chk, err := sim.Check(e.ctx, e.db, e.storage(), sim.CheckOptions{Stars: []string{"s1"}, SettledOnly: true})
			if err != nil || !chk.OK() || chk.Checked == 0 {
				t.Fatalf("novasim check: %+v %v", chk, err)
			}
			rep, err := verify.Verify(e.ctx, e.db.Streams(), bundle.NewReader(e.topology()), verify.Options{Star: "s1"})
			if err != nil || len(rep.Findings) != 0 {
				t.Fatalf("verify: %+v %v", rep, err)
			}
		})
	}
}

// firstChunk is the stream's chunk that starts the ref, from its first
// slot's footer.
func (e *env) firstChunk(id catalog.StreamID, ref catalog.SpanRef) bundlefmt.Entry {
	e.t.Helper()
	sl := ref.Slots[0]
	key := bundlefmt.SlotKey("s1", uint64(sl.Epoch), uint64(sl.Seq))
	buf, size, err := e.store.GetRange(e.ctx, e.std, key, sl.FooterOffset, sl.FooterLength+bundlefmt.TrailerSize)
	if err != nil {
		e.t.Fatal(err)
	}
	ft, err := bundlefmt.OpenFooter(key, uint64(sl.FooterOffset), buf, uint64(size), bundlefmt.TransitBase)
	if err != nil {
		e.t.Fatal(err)
	}
	i, ok := ft.Find(id, uint64(ref.FirstRecord))
	if !ok {
		e.t.Fatalf("slot %s has no chunk of %s at %d", key, id, ref.FirstRecord)
	}
	en, err := ft.Entry(i)
	if err != nil {
		e.t.Fatal(err)
	}
	return en
}
