package settle_test

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/verify"
)

// probedModes is the mode the checksum probe configures on each test
// server: by source on versitygw 1.8.0 (ranged copies from a CRC-32C
// source misreport), full object on SeaweedFS.
var probedModes = map[string]objstore.ChecksumMode{
	testenv.ServerVersitygw: objstore.ChecksumBySource,
	testenv.ServerSeaweedFS: objstore.ChecksumFullObject,
}

// probedEnv is an env on the test S3 server whose store is configured as
// the checksum probe configures it (probedModes) and stores slots with
// put; and the probe's answer.
func probedEnv(t *testing.T, put objstore.ChecksumAlgorithm) (*env, *assembleRecorder, objstore.ChecksumProbe) {
	t.Helper()
	e, _ := newEnv(t, s3Backend("s3-probed", "probed", http.DefaultTransport, func(c *objstore.S3Config) { c.PutChecksum = put }), 0, 0)
	server := testenv.S3(t).Server
	want, ok := probedModes[server]
	if !ok {
		t.Fatalf("no expected probe mode for the S3 server %q: add it to probedModes", server)
	}
	st := e.store.(*s3store.Store)
	p, err := st.ProbeChecksum(e.ctx, e.std)
	if err != nil {
		t.Fatal(err)
	}
	if e.store, err = st.WithProbe(p); err != nil {
		t.Fatal(err)
	}
	if m := e.store.(*s3store.Store).Config().Checksum; m != want {
		t.Fatalf("the probe configured %s; %s is %s", m, server, want)
	}
	return e, &assembleRecorder{Store: e.store}, p
}

// storedWith is the algorithm the server stores key of the standard bucket
// with, as HEAD reports it ("" for none): a slot sent without a checksum
// (Content-MD5 alone) is stored with the server's default.
func storedWith(t *testing.T, e *env, key string) objstore.ChecksumAlgorithm {
	t.Helper()
	out, err := e.store.(*s3store.Store).Client().HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: &e.std, Key: &key, ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatalf("head %s: %v", key, err)
	}
	switch {
	case out.ChecksumCRC32C != nil:
		return objstore.AlgorithmCRC32C
	case out.ChecksumCRC32 != nil:
		return objstore.AlgorithmCRC32
	case out.ChecksumCRC64NVME != nil:
		return objstore.AlgorithmCRC64NVME
	case out.ChecksumSHA256 != nil:
		return objstore.AlgorithmSHA256
	case out.ChecksumSHA1 != nil:
		return objstore.AlgorithmSHA1
	}
	return ""
}

func probedSettler(e *env, rec *assembleRecorder) *settle.Settler {
	return e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topologyOver(rec), Pending: e.pending},
		settle.Config{CapBytes: 256 << 20, TargetBytes: 4 << 20, MaxStreams: 1000, MaxBytes: 1 << 40,
			Concurrency: 2, ReapGrace: time.Hour})
}

// copyShape: two hot streams whose 6 MiB chunks are copied server side,
// beside two cold ones that are gathered.
var copyShape = fairShape{name: "copy", hot: 2, cold: 2, flights: 2, hotRecs: 96, hotBytes: 64 << 10, coldRecs: 4, coldBytes: 512}

// TestServerCheckedBySlotChecksum settles copied chunks on the test S3
// server under the mode its probe configures: slots stored with an
// algorithm whose ranged copies the probe found right are checked by the
// server at completion with no byte read back, others are read back (on
// versitygw 1.8.0, by source: CRC-32 or no checksum checked, CRC-32C read
// back; on SeaweedFS, full object: every one checked). Every object is
// verified, and auditor verify finds them all sound.
func TestServerCheckedBySlotChecksum(t *testing.T) {
	for _, put := range []objstore.ChecksumAlgorithm{objstore.AlgorithmCRC32, objstore.AlgorithmNone, objstore.AlgorithmCRC32C} {
		t.Run(string(put), func(t *testing.T) {
			e, rec, probe := probedEnv(t, put)
			writeFairSlots(t, e, copyShape)
			readBack := !probe.Copies[storedWith(t, e, bundlefmt.SlotKey("s1", 1, 0))]
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
			if got := rec.readBack.Load() > 0; got != readBack {
				t.Errorf("slots stored with %s: read back %d bytes, want read-back %v", put, rec.readBack.Load(), readBack)
			}
			rep, err := verify.Verify(e.ctx, e.db.Streams(), bundle.NewReader(e.topology()), verify.Options{Star: "s1"})
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
	testenv.RequireVersitygw(t, "the test damages a slot on versitygw's posix backend, and expects its by-source mode")
	for _, put := range []objstore.ChecksumAlgorithm{objstore.AlgorithmCRC32, objstore.AlgorithmCRC32C} {
		t.Run(string(put), func(t *testing.T) {
			e, rec, _ := probedEnv(t, put)
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
			q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
			if cy.StreamsQuarantined != 1 || len(q) != 1 || q[0].ErrorClass != "checksum" {
				t.Fatalf("quarantine %+v after %+v", q, cy)
			}
			if (rec.readBack.Load() > 0) != (put == objstore.AlgorithmCRC32C) {
				t.Errorf("slot stored with %s: read back %d bytes", put, rec.readBack.Load())
			}
			rep, err := verify.Verify(e.ctx, e.db.Streams(), bundle.NewReader(e.topology()), verify.Options{Star: "s1"})
			if err != nil || len(rep.Findings) != 0 {
				t.Fatalf("verify after the damage: %+v %v", rep, err)
			}
		})
	}
}
