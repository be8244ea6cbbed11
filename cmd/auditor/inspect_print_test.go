package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nova/auditor/bundlefmt"
)

// inspectPrintPoisonKey is the key of bundlefmt's worked example 3 (a poison
// slot); worked example 1's is inspectSlotKey.
const inspectPrintPoisonKey = "stars/s1/chain/00000000000000000003/00000000000000000008"

// readFormatTestdata reads one of bundlefmt's test objects.
func readFormatTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "bundlefmt", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func expectFromKey(t testing.TB, key string) bundlefmt.Expect {
	t.Helper()
	exp, err := bundlefmt.ExpectFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestInspectObject(t *testing.T) {
	settled := readFormatTestdata(t, "golden_settled_4chunks.bin")
	v2 := append([]byte(nil), settled...)
	v2[len(v2)-36] = 2
	rot := append([]byte(nil), settled...)
	rot[5] ^= 0x40
	for _, tc := range []struct {
		name string
		obj  []byte
		opts inspectOptions
		code int
		out  []string
	}{
		{"flight json", readFormatTestdata(t, "example1_flight.bin"), inspectOptions{Expect: expectFromKey(t, inspectSlotKey), JSON: true}, exitOK,
			[]string{`"kind": "flight"`, `"footer_offset": 73`, `"nonce": 81985529216486895`, `"stream_id": "00112233-4455-6677-8899-aabbccddeeff"`, `"data_crc": 3819684979`}},
		{"poison human", readFormatTestdata(t, "example3_poison.bin"), inspectOptions{Expect: expectFromKey(t, inspectPrintPoisonKey)}, exitOK,
			[]string{"poison", "0xfedcba9876543210"}},
		{"settled records json", settled, inspectOptions{JSON: true, Records: true}, exitOK,
			[]string{`"kind": "settled"`, `"header_count"`, `"content_bytes"`, `"batch_end": true`}},
		{"settled records human", settled, inspectOptions{Records: true}, exitOK, []string{"content bytes", "record"}},
		{"unsupported", v2, inspectOptions{JSON: true}, exitUnsupported, []string{`"class": "unsupported_version"`, `"version": 2`}},
		{"checksum", rot, inspectOptions{File: "f"}, exitFindings, nil},
		{"wrong kind", settled, inspectOptions{Expect: bundlefmt.Expect{Kind: bundlefmt.KindFlight}}, exitFindings, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := inspectObject(tc.obj, tc.opts, &out, &errOut); code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, errOut.String())
			}
			for _, w := range tc.out {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %s:\n%s", w, out.String())
				}
			}
			if tc.opts.JSON && !json.Valid(out.Bytes()) {
				t.Fatalf("invalid JSON:\n%s", out.String())
			}
			if tc.code != exitOK && !strings.Contains(errOut.String(), "inspect: bundlefmt: ") {
				t.Fatalf("stderr: %q", errOut.String())
			}
		})
	}
	// Tombstones are listed as such.
	var out bytes.Buffer
	inspectObject(settled, inspectOptions{JSON: true, Records: true}, &out, &out)
	if !strings.Contains(out.String(), `"tombstone": true`) {
		t.Fatalf("no tombstone in the golden settled object:\n%.2000s", out.String())
	}
	if code := inspectObject(settled, inspectOptions{}, failWriter{}, &out); code != exitFailure {
		t.Fatalf("write failure: exit %d", code)
	}
}

// TestInspectExitCode: inspect's exit code follows the error's class (a
// checksum mismatch is corrupt); an error of no class is a failure.
func TestInspectExitCode(t *testing.T) {
	checksum := &bundlefmt.FormatError{Key: "k", Offset: 7, Field: "x.crc", Err: bundlefmt.ErrChecksum}
	corrupt := &bundlefmt.FormatError{Key: "k", Offset: 4, Field: "v", Err: bundlefmt.ErrCorrupt}
	version := &bundlefmt.FormatError{Offset: 4, Field: "v", Version: 2, Err: bundlefmt.ErrUnsupportedVersion}
	if inspectExitCode(checksum) != exitFindings || inspectExitCode(corrupt) != exitFindings ||
		inspectExitCode(version) != exitUnsupported || inspectExitCode(nil) != exitOK || inspectExitCode(errors.New("disk full")) != exitFailure {
		t.Fatal("exit codes")
	}
}
