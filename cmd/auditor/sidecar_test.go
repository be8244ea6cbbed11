package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/settle"
)

// TestCorruptSidecarIsRebuiltNeverUploaded kills the auditor on versitygw
// right after it staged a gathered part as a pending sidecar, damages every
// sidecar on disk, and restarts it: the damaged parts fail verification and
// are rebuilt from source, so every settled object is exactly right
// (bundlefmt validates every DataCRC), and nothing is left behind.
func TestCorruptSidecarIsRebuiltNeverUploaded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	ctx := context.Background()
	s3env := testenv.S3(t)
	db, url := testenv.MigratedDB(t)
	st, _ := teststore.S3Store(t, teststore.Options{})
	bucket := testenv.BucketName("sidecar")
	teststore.CreateBucket(t, st, bucket)
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	// Two streams, twelve flights, 2 MiB chunks each: every stream's object
	// is 24 MiB of sub-5 MiB chunks, more than one gathered PUT may carry,
	// so it is a multipart upload whose parts are gathered and staged.
	const streams, flights, perChunk, recBytes = 2, 12, 32, 64 << 10
	body := make([]byte, recBytes)
	for i := range body {
		body[i] = byte(i * 7)
	}
	for seq := 0; seq < flights; seq++ {
		var chunks []bundlefmt.Chunk
		var batches []writepath.AbsorbBatch
		for i := 0; i < streams; i++ {
			id := bundlefmt.StreamID{0: 0x5c, 15: byte(i)}
			if seq == 0 {
				if err := writepath.New(db).CreateStream(ctx, id, "s1", "b0"); err != nil {
					t.Fatal(err)
				}
			}
			cb := bundlefmt.NewChunkBuilder(id, uint64(seq*perChunk))
			for j := 0; j < perChunk; j++ {
				body[j] ^= byte(seq + i)
				if err := cb.Add(bundlefmt.Record{Body: body}, int64(seq), j == perChunk-1); err != nil {
					t.Fatal(err)
				}
			}
			chunks = append(chunks, cb.Chunk())
			batches = append(batches, writepath.AbsorbBatch{Stream: id, FirstRecord: int64(seq * perChunk), Count: perChunk})
		}
		obj, err := bundlefmt.EncodeFlight(1, uint64(seq), 1, chunks)
		if err != nil {
			t.Fatal(err)
		}
		key := bundlefmt.SlotKey("s1", 1, uint64(seq))
		if err := st.PutIfAbsent(ctx, bucket, key, obj); err != nil {
			t.Fatal(err)
		}
		f, _ := bundlefmt.OpenObjectFooter(key, obj, bundlefmt.EnvelopeSize)
		if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: int64(seq), FooterOffset: int64(f.FooterOffset()),
			FooterLength: int64(f.FooterLength()), Batches: batches}}); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	e := &crashEnv{t: t, ctx: ctx, bin: auditorBinary(t), db: db, fs: st, bucket: bucket,
		env: []string{"AWS_ACCESS_KEY_ID=" + s3env.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3env.SecretKey, "AWS_REGION=us-east-1"},
		common: []string{"--star", "s1", "--database-url", url, "--data-dir", filepath.Join(root, "data"),
			"--denorm-linger", "0s", "--denorm-tail-growth", "0", "--holder", "sidecar-test", "--denorm-output-cap-mib", "64",
			"--s3-endpoint", s3env.Endpoint, "--s3-path-style", "--bucket", bucket,
			"--settle-concurrency", "1", "--log-format", "json", "--log-level", "warn"}}
	code, out := e.run(string(settle.CrashAfterSidecarStaged) + ":2")
	if code != -int(syscall.SIGKILL) {
		t.Fatalf("the armed cycle was not killed at the second staged part: exit %d: %s", code, out)
	}
	pending := filepath.Join(root, "data", "pending")
	ents, err := os.ReadDir(pending)
	if err != nil {
		t.Fatal(err)
	}
	damaged := 0
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".pending-object") {
			continue
		}
		p := filepath.Join(pending, ent.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-1] ^= 0xff // a flipped byte in the part's last byte
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		damaged++
	}
	if damaged == 0 {
		t.Fatal("no staged sidecar to damage")
	}
	for i := 0; i < 2; i++ {
		if code, out := e.run(""); code != 0 {
			t.Fatalf("restart %d: exit %d: %s", i+1, code, out)
		}
	}
	all, _ := db.Streams().StreamsOfStar(ctx, "s1")
	for _, s := range all {
		if s.SettledThrough != s.NextRecord {
			t.Fatalf("stream %s settled %d of %d", s.ID, s.SettledThrough, s.NextRecord)
		}
		entries, _ := db.Streams().EntriesOfStream(ctx, s.ID)
		for _, en := range entries {
			key := bundlefmt.SettledKey(s.Bucket, s.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
			obj, _, err := st.GetRange(ctx, bucket, key, 0, en.ObjectBytes)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bundlefmt.ValidateObject(obj, bundlefmt.Expect{Key: key, Kind: bundlefmt.KindSettled,
				Stream: s.ID, FirstRecord: uint64(en.FirstRecord), CheckKey: true}); err != nil {
				t.Fatalf("settled object %s: %v", key, err)
			}
		}
	}
	if in, _ := db.Settle().Intents(ctx, "s1", "publish", 0); len(in) != 0 {
		t.Errorf("open publish intents: %+v", in)
	}
	if left, _ := os.ReadDir(pending); len(left) != 0 {
		t.Errorf("%d sidecars left", len(left))
	}
	t.Logf("damaged %d staged sidecars; the restarted auditor rebuilt them from source", damaged)
}
