package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
)

// TestLsListsTheCatalogReadOnly: after a cycle settled a star, auditor ls
// run as a role that may only read (SELECT, every transaction read-only)
// lists every catalog entry of every stream, with the key, record range,
// revision, size, class and bucket the catalog holds; --stream lists one
// stream; --json is the same entries; an unknown stream exits 2.
func TestLsListsTheCatalogReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, db, _, root := writtenFileStar(t, 3, 7, 4)
	if code, out, errs := runCLI(t, "run", "--once", "--star", "s1", "--database-url", url, "--fs-root", root,
		"--data-dir", t.TempDir(), "--denorm-linger", "0s", "--log-level", "warn"); code != 0 {
		t.Fatalf("run --once: %d %q %q", code, out, errs)
	}
	streams, err := db.Streams().StreamsOfStar(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]catalog.Entry{} // by key
	var one catalog.Stream
	for _, st := range streams {
		ens, err := db.Streams().EntriesOfStream(ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range ens {
			want[bundle.EntryKey(st.Bucket, en)] = en
			one = st
		}
	}
	if len(want) == 0 {
		t.Fatal("the cycle cataloged nothing")
	}

	// A role that can read and nothing else.
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "nova_ls_ro_" + hex.EncodeToString(b[:])
	execSQL(t, testenv.DatabaseURL(t), "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		execSQL(t, url, "DROP OWNED BY "+role)
		execSQL(t, testenv.DatabaseURL(t), "DROP ROLE IF EXISTS "+role)
	})
	execSQL(t, url, "GRANT USAGE ON SCHEMA nova TO "+role)
	execSQL(t, url, "GRANT SELECT ON ALL TABLES IN SCHEMA nova TO "+role)
	execSQL(t, testenv.DatabaseURL(t), "ALTER ROLE "+role+" SET default_transaction_read_only = on")
	ro := roleURL(t, url, role)

	code, out, errs := runCLI(t, "ls", "--star", "s1", "--database-url", ro)
	if code != exitOK || errs != "" {
		t.Fatalf("ls: %d %q %q", code, out, errs)
	}
	for key, en := range want {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasSuffix(l, key) {
				line = l
			}
		}
		f := strings.Fields(line)
		if len(f) != 9 || f[1]+" "+f[2] != "["+itoa(en.FirstRecord)+", "+itoa(en.EndRecord())+")" || f[3] != itoa(en.RecordCount) ||
			f[4] != itoa(int64(en.Revision)) || f[5] != itoa(en.ObjectBytes) || f[6] != en.Class {
			t.Errorf("ls line of %s: %q (entry %+v)\n%s", key, line, en, out)
		}
	}
	if !strings.Contains(out, itoa(int64(len(want)))+" catalog entries of "+itoa(int64(len(streams)))+" streams") {
		t.Errorf("ls summary:\n%s", out)
	}

	code, out, errs = runCLI(t, "ls", "--star", "s1", "--database-url", ro, "--stream", one.ID.String(), "--json")
	var doc struct {
		Star    string     `json:"star"`
		Streams []LsStream `json:"streams"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != exitOK || err != nil || doc.Star != "s1" || len(doc.Streams) != 1 {
		t.Fatalf("ls --stream --json: %d %v %q %q", code, err, out, errs)
	}
	s := doc.Streams[0]
	ens, err := db.Streams().EntriesOfStream(ctx, one.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Stream != one.ID.String() || s.Bucket != one.Bucket || s.SettledThrough != one.SettledThrough || len(s.Entries) != len(ens) {
		t.Fatalf("ls --json stream %+v, want %+v with %d entries", s, one, len(ens))
	}
	for i, en := range ens {
		got := s.Entries[i]
		if got.Key != bundle.EntryKey(one.Bucket, en) || got.FirstRecord != en.FirstRecord || got.RecordCount != en.RecordCount ||
			got.EndRecord != en.EndRecord() || got.Revision != en.Revision || got.ObjectBytes != en.ObjectBytes || got.Class != en.Class {
			t.Errorf("ls --json entry %d: %+v, want %+v", i, got, en)
		}
	}

	if code, _, errs := runCLI(t, "ls", "--star", "s1", "--database-url", ro, "--stream", catalog.StreamID{1: 7}.String()); code != exitUsage ||
		!strings.Contains(errs, "no stream") {
		t.Fatalf("ls of an unknown stream: %d %q", code, errs)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
