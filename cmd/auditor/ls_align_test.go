package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nova/auditor/catalog"
)

// fakeLs is an lsReader of streams and their entries in memory.
type fakeLs struct {
	streams []catalog.Stream
	entries map[catalog.StreamID][]catalog.Entry
}

func (f fakeLs) StreamsOfStar(context.Context, string) ([]catalog.Stream, error) {
	return f.streams, nil
}

func (f fakeLs) Stream(_ context.Context, id catalog.StreamID) (catalog.Stream, error) {
	for _, s := range f.streams {
		if s.ID == id {
			return s, nil
		}
	}
	return catalog.Stream{}, catalog.ErrNotFound
}

func (f fakeLs) EntriesOfStream(_ context.Context, id catalog.StreamID) ([]catalog.Entry, error) {
	return f.entries[id], nil
}

// TestLsTableIsAligned: the table's columns line up over every stream,
// whatever the widths of each stream's values (a stream with no entry
// included), below the header, and the summary ends it.
func TestLsTableIsAligned(t *testing.T) {
	f := fakeLs{entries: map[catalog.StreamID][]catalog.Entry{}}
	for i, n := range []int64{5610, 15699, 0, 2715} {
		id := catalog.StreamID{15: byte(i + 1)}
		f.streams = append(f.streams, catalog.Stream{ID: id, Star: "s1", Bucket: "b0", Epoch: 1, Class: "standard", NextRecord: n + 3, SettledThrough: n})
		if n > 0 {
			f.entries[id] = []catalog.Entry{{Stream: id, Epoch: 1, RecordCount: n, Revision: int32(i), ObjectBytes: n * 1000, Class: "standard"}}
		}
	}
	var out strings.Builder
	if err := listCatalog(context.Background(), &out, f, "s1", nil, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 6 || lines[5] != "3 catalog entries of 4 streams" {
		t.Fatalf("ls:\n%s", out.String())
	}
	for _, col := range []string{"RECORDS", "COUNT", "REVISION", "BYTES", "CLASS", "BUCKET", "KEY"} {
		at := strings.Index(lines[0], col)
		for _, l := range lines[1:5] {
			if at < 1 || len(l) <= at || l[at-1] != ' ' || l[at] == ' ' {
				t.Errorf("column %s (at %d) does not line up:\n%s", col, at, out.String())
				break
			}
		}
	}
}
