package bundlefmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestInspect(t *testing.T) {
	settled := readTestdata(t, "golden_settled_4chunks.bin")
	v2 := append([]byte(nil), settled...)
	v2[len(v2)-36] = 2
	rot := append([]byte(nil), settled...)
	rot[5] ^= 0x40
	for _, tc := range []struct {
		name string
		obj  []byte
		opts InspectOptions
		code int
		out  []string
	}{
		{"flight json", readTestdata(t, "example1_flight.bin"), InspectOptions{Expect: mustExpect(t, example1Key), JSON: true}, ExitOK,
			[]string{`"kind": "flight"`, `"footer_offset": 73`, `"nonce": 81985529216486895`, `"stream_id": "00112233445566778899aabbccddeeff"`, `"data_crc": 3819684979`}},
		{"poison human", readTestdata(t, "example3_poison.bin"), InspectOptions{Expect: mustExpect(t, example3Key)}, ExitOK,
			[]string{"poison", "0xfedcba9876543210"}},
		{"settled records json", settled, InspectOptions{JSON: true, Records: true}, ExitOK,
			[]string{`"kind": "settled"`, `"header_count"`, `"content_bytes"`, `"batch_end": true`}},
		{"settled records human", settled, InspectOptions{Records: true}, ExitOK, []string{"content bytes", "record"}},
		{"unsupported", v2, InspectOptions{JSON: true}, ExitUnsupported, []string{`"class": "unsupported_version"`, `"version": 2`}},
		{"checksum", rot, InspectOptions{File: "f"}, ExitCorrupt, nil},
		{"wrong kind", settled, InspectOptions{Expect: Expect{Kind: KindFlight}}, ExitCorrupt, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Inspect(tc.obj, tc.opts, &out, &errOut); code != tc.code {
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
			if tc.code != ExitOK && !strings.Contains(errOut.String(), "inspect: bundlefmt: ") {
				t.Fatalf("stderr: %q", errOut.String())
			}
		})
	}
	// Tombstones are listed as such.
	var out bytes.Buffer
	Inspect(settled, InspectOptions{JSON: true, Records: true}, &out, &out)
	if !strings.Contains(out.String(), `"tombstone": true`) {
		t.Fatalf("no tombstone in the golden settled object:\n%.2000s", out.String())
	}
	if code := Inspect(settled, InspectOptions{}, failWriter{}, &out); code != ExitFailure {
		t.Fatalf("write failure: exit %d", code)
	}
}
