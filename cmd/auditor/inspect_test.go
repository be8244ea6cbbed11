package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	inspectSlotKey    = "stars/s1/chain/00000000000000000003/00000000000000000007"
	inspectSettledKey = "buckets/b1/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000~0"
)

// inspectFiles copies the docs/format.md#worked-example-a-transit-bundle objects from bundlefmt's testdata
// into a temporary directory, plus damaged variants.
func inspectFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	write := func(name string, b []byte) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	for name, src := range map[string]string{
		"flight":  "example1_flight.bin",
		"settled": "example2_settled.bin",
		"poison":  "example3_poison.bin",
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "bundlefmt", "testdata", src))
		if err != nil {
			t.Fatal(err)
		}
		write(name, b)
		switch name {
		case "flight":
			rot := append([]byte(nil), b...)
			rot[62] ^= 1 // a chunk byte: DataCRC mismatch
			write("flight-rot", rot)
			v2 := append([]byte(nil), b...)
			v2[4] = 2 // envelope version 2
			write("flight-v2", v2)
		case "settled":
			v0 := append([]byte(nil), b...)
			v0[len(v0)-36] = 0 // trailer version 0
			write("settled-v0", v0)
			write("settled-cut", b[:len(b)-1])
		}
	}
	return out
}

func runInspectT(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = dispatch(context.Background(), env{stdout: &o, stderr: &e, getenv: func(string) string { return "" }}, append([]string{"inspect"}, args...))
	return code, o.String(), e.String()
}

func TestInspectExitCodes(t *testing.T) {
	f := inspectFiles(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"flight sniffed", []string{f["flight"]}, 0},
		{"settled sniffed", []string{f["settled"]}, 0},
		{"poison sniffed", []string{f["poison"]}, 0},
		{"flight with key", []string{"--key", inspectSlotKey, f["flight"]}, 0},
		{"flight key after file", []string{f["flight"], "--key", "pfx/" + inspectSlotKey, "--json"}, 0},
		{"transit epoch seq", []string{"--transit", "--epoch", "3", "--seq", "7", f["flight"]}, 0},
		{"transit wrong seq", []string{"--transit", "--epoch", "3", "--seq", "8", f["flight"]}, 3},
		{"poison wrong key", []string{"--key", inspectSlotKey, f["poison"]}, 3},
		{"settled with key", []string{"--settled", "--key", inspectSettledKey, f["settled"]}, 0},
		{"settled asserted", []string{"--settled", f["settled"]}, 0},
		{"flight asserted settled", []string{"--settled", f["flight"]}, 3},
		{"settled asserted transit", []string{"--transit", "--epoch", "3", "--seq", "7", f["settled"]}, 3},
		{"settled wrong first record", []string{"--key", strings.Replace(inspectSettledKey, "1000~", "1001~", 1), f["settled"]}, 3},
		{"checksum mismatch", []string{f["flight-rot"]}, 3},
		{"envelope version 2", []string{f["flight-v2"]}, 4},
		{"trailer version 0", []string{"--json", f["settled-v0"]}, 4},
		{"truncated", []string{f["settled-cut"]}, 3},
		{"missing file", []string{filepath.Join(t.TempDir(), "nope")}, 1},
		{"no file", nil, 2},
		{"two files", []string{f["flight"], f["poison"]}, 2},
		{"settled and transit", []string{"--settled", "--transit", f["flight"]}, 2},
		{"transit without epoch", []string{"--transit", f["flight"]}, 2},
		{"epoch without transit", []string{"--epoch", "3", "--seq", "7", f["flight"]}, 2},
		{"epoch without seq", []string{"--transit", "--epoch", "3", f["flight"]}, 2},
		{"key and epoch", []string{"--transit", "--epoch", "3", "--seq", "7", "--key", inspectSlotKey, f["flight"]}, 2},
		{"settled key with transit", []string{"--transit", "--key", inspectSettledKey, f["settled"]}, 2},
		{"bad key", []string{"--key", "stars/s1/chain/3/7", f["flight"]}, 2},
		{"unknown flag", []string{"--nope", f["flight"]}, 2},
		{"help", []string{"-h"}, 0},
		{"double dash", []string{"--json", "--", f["flight"]}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runInspectT(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
		})
	}
}

func TestInspectJSON(t *testing.T) {
	f := inspectFiles(t)
	code, out, stderr := runInspectT("--json", "--records", "--key", inspectSlotKey, f["flight"])
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		Kind         string  `json:"kind"`
		ObjectSize   uint64  `json:"object_size"`
		FooterOffset uint64  `json:"footer_offset"`
		FooterLength uint64  `json:"footer_length"`
		Epoch        *uint64 `json:"epoch"`
		Seq          *uint64 `json:"seq"`
		Nonce        *uint64 `json:"nonce"`
		Chunks       []struct {
			StreamID    string `json:"stream_id"`
			FirstRecord uint64 `json:"first_record"`
			RecordCount int    `json:"record_count"`
			DataOffset  uint64 `json:"data_offset"`
			ChunkBytes  uint64 `json:"chunk_bytes"`
			DataCRC     uint32 `json:"data_crc"`
			Records     []struct {
				Length       uint32 `json:"length"`
				Timestamp    int64  `json:"timestamp"`
				BatchEnd     bool   `json:"batch_end"`
				HeaderCount  int    `json:"header_count"`
				ContentBytes int64  `json:"content_bytes"`
			} `json:"records"`
		} `json:"chunks"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Kind != "flight" || doc.ObjectSize != 230 || doc.FooterOffset != 73 || doc.FooterLength != 117 ||
		doc.Epoch == nil || *doc.Epoch != 3 || *doc.Seq != 7 || *doc.Nonce != 0x0123456789abcdef || len(doc.Chunks) != 1 {
		t.Fatalf("summary:\n%s", out)
	}
	c := doc.Chunks[0]
	if c.StreamID != "00112233-4455-6677-8899-aabbccddeeff" || c.FirstRecord != 1000 || c.RecordCount != 2 ||
		c.DataOffset != 60 || c.ChunkBytes != 13 || c.DataCRC != 0xe3abc473 || len(c.Records) != 2 {
		t.Fatalf("chunk:\n%s", out)
	}
	if r := c.Records[1]; r.Length != 7 || r.Timestamp != 1700000000001 || !r.BatchEnd || r.ContentBytes != 6 || r.HeaderCount != 0 {
		t.Fatalf("record:\n%s", out)
	}
	// A settled object has no epoch, seq or nonce in its bytes.
	code, out, _ = runInspectT("--json", f["settled"])
	if code != 0 || strings.Contains(out, `"nonce"`) || !strings.Contains(out, `"kind": "settled"`) {
		t.Fatalf("settled json (exit %d):\n%s", code, out)
	}
	// A failure in JSON mode is still a JSON document, with the class.
	code, out, _ = runInspectT("--json", f["flight-rot"])
	if code != 3 || !strings.Contains(out, `"class": "checksum"`) {
		t.Fatalf("error json (exit %d):\n%s", code, out)
	}
}

func TestInspectHuman(t *testing.T) {
	f := inspectFiles(t)
	code, out, _ := runInspectT("--records", f["flight"])
	for _, want := range []string{"flight", "230", "offset 73, length 117", "00112233-4455-6677-8899-aabbccddeeff", "0xe3abc473", "1700000000001"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	code, out, _ = runInspectT(f["poison"])
	if code != 0 || !strings.Contains(out, "poison") || !strings.Contains(out, "0xfedcba9876543210") {
		t.Fatalf("poison (exit %d):\n%s", code, out)
	}
	_, _, stderr := runInspectT(f["flight-v2"])
	if !strings.Contains(stderr, "unsupported version") || !strings.Contains(stderr, "version 2") {
		t.Fatalf("version error:\n%s", stderr)
	}
}
