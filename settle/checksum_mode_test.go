package settle_test

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/verify"
)

// probedEnv is an env on versitygw whose store is configured as the
// checksum probe configures it (by source on versitygw 1.8.0) and stores
// slots with put.
func probedEnv(t *testing.T, put objstore.ChecksumAlgorithm) (*env, *assembleRecorder) {
	t.Helper()
	e, _ := newEnv(t, s3Backend("s3-probed", "probed", http.DefaultTransport, func(c *objstore.S3Config) { c.PutChecksum = put }), 0, 0)
	st := e.store.(*s3store.Store)
	p, err := st.ProbeChecksum(e.ctx, e.std)
	if err != nil {
		t.Fatal(err)
	}
	if e.store, err = st.WithProbe(p); err != nil {
		t.Fatal(err)
	}
	if m := e.store.(*s3store.Store).Config().Checksum; m != objstore.ChecksumBySource {
		t.Fatalf("the probe configured %s; versitygw 1.8.0 is by-source", m)
	}
	return e, &assembleRecorder{Store: e.store}
}

func probedSettler(e *env, rec *assembleRecorder) *settle.Settler {
	return e.newSettler(settle.Deps{DB: e.db, Topology: e.topologyOver(rec), Pending: e.pending},
		settle.Config{CapBytes: 256 << 20, TargetBytes: 4 << 20, MaxStreams: 1000, MaxBytes: 1 << 40,
			Concurrency: 2, ReapGrace: time.Hour})
}

// copyShape: two hot streams whose 6 MiB chunks are copied server side,
// beside two cold ones that are gathered.
var copyShape = fairShape{name: "copy", hot: 2, cold: 2, flights: 2, hotRecs: 96, hotBytes: 64 << 10, coldRecs: 4, coldBytes: 512}

// TestServerCheckedBySlotChecksum settles copied chunks on versitygw under
// the probe's by-source mode: slots stored with CRC-32 or no checksum are
// checked by the server at completion with no byte read back; slots stored
// with CRC-32C (whose ranged copies versitygw misreports) are read back.
// Every object is verified, and auditor verify finds them all sound.
func TestServerCheckedBySlotChecksum(t *testing.T) {
	for _, c := range []struct {
		put      objstore.ChecksumAlgorithm
		readBack bool
	}{{objstore.AlgorithmCRC32, false}, {objstore.AlgorithmNone, false}, {objstore.AlgorithmCRC32C, true}} {
		t.Run(string(c.put), func(t *testing.T) {
			e, rec := probedEnv(t, c.put)
			writeFairSlots(t, e, copyShape)
			cy, err := e.cycle("s1", probedSettler(e, rec))
			if err != nil || cy.StreamsSettled != 4 || cy.StreamsQuarantined != 0 {
				t.Fatalf("%+v %v", cy, err)
			}
			t.Logf("%+v; read back %d bytes in %d of %d assemblies", cy, rec.readBack.Load(), rec.readBackAssemblies.Load(), rec.assemblies.Load())
			if cy.BytesCopied < 4*(6<<20) {
				t.Fatalf("copied %d bytes: the hot chunks were not copied server side", cy.BytesCopied)
			}
			if rec.unverified.Load() != 0 {
				t.Errorf("%d assemblies published unverified", rec.unverified.Load())
			}
			if got := rec.readBack.Load() > 0; got != c.readBack {
				t.Errorf("slots stored with %s: read back %d bytes, want read-back %v", c.put, rec.readBack.Load(), c.readBack)
			}
			rep, err := verify.Verify(e.ctx, e.db, bundle.NewReader(e.topology()), verify.Options{Star: "s1"})
			if err != nil || len(rep.Findings) != 0 || rep.Objects < 4 {
				t.Fatalf("verify: %+v %v", rep, err)
			}
		})
	}
}

// TestServerCheckedCatchesDamagedSlot damages a hot chunk of a slot at rest
// on versitygw's disk (the slot's stored checksum and ETag unchanged)
// before the settle copies it. With the slot stored with CRC-32 the
// server's full-object check refuses the assembly; with CRC-32C the
// read-back finds it and the key is condemned. Either way the stream is
// quarantined with class checksum and no catalog entry points at bad bytes.
func TestServerCheckedCatchesDamagedSlot(t *testing.T) {
	for _, put := range []objstore.ChecksumAlgorithm{objstore.AlgorithmCRC32, objstore.AlgorithmCRC32C} {
		t.Run(string(put), func(t *testing.T) {
			e, rec := probedEnv(t, put)
			writeFairSlots(t, e, copyShape)
			key := bundlefmt.SlotKey("s1", 1, 0)
			f, err := os.OpenFile(testenv.VersitygwObjectPath(t, e.std, key), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			at := int64(bundlefmt.EnvelopeSize + 1<<20) // inside the first hot stream's chunk
			b := []byte{0}
			if _, err := f.ReadAt(b, at); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0x10
			if _, err := f.WriteAt(b, at); err != nil {
				t.Fatal(err)
			}
			f.Close()
			cy, err := e.cycle("s1", probedSettler(e, rec))
			t.Logf("%+v %v; read back %d bytes", cy, err, rec.readBack.Load())
			q, _ := e.db.Quarantined(e.ctx, "s1")
			if cy.StreamsQuarantined != 1 || len(q) != 1 || q[0].ErrorClass != "checksum" {
				t.Fatalf("quarantine %+v after %+v", q, cy)
			}
			if (rec.readBack.Load() > 0) != (put == objstore.AlgorithmCRC32C) {
				t.Errorf("slot stored with %s: read back %d bytes", put, rec.readBack.Load())
			}
			rep, err := verify.Verify(e.ctx, e.db, bundle.NewReader(e.topology()), verify.Options{Star: "s1"})
			if err != nil || len(rep.Findings) != 0 {
				t.Fatalf("verify after the damage: %+v %v", rep, err)
			}
		})
	}
}
