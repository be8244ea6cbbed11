package settle

import (
	"testing"

	"github.com/nova/auditor/bundlefmt"
)

// TestMatchSourcesAcceptsARewriteUnderOtherErasures: a standing object
// written before a newer erasure holds some of the planned chunk's records
// as tombstones and others as the source has them; adoption accepts it
// record by record, with the DataCRC of exactly that mix, and refuses a
// tombstone no erasure asked for or a wrong DataCRC.
func TestMatchSourcesAcceptsARewriteUnderOtherErasures(t *testing.T) {
	sid := bundlefmt.StreamID{7}
	b := bundlefmt.NewChunkBuilder(sid, 100)
	for i := 0; i < 5; i++ {
		if err := b.Add(bundlefmt.Record{Body: []byte{'a' + byte(i), 'b', 'c'}}, int64(i), false); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Chunk()
	erase := func(dead ...uint64) (bundlefmt.Entry, []byte) {
		e, d, _, err := bundlefmt.EraseRecords("src", c.Entry, c.Data, func(r uint64) bool {
			for _, x := range dead {
				if x == r {
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Fatal(err)
		}
		return e, d
	}
	planned, pdata := erase(101, 102) // the plan now: two records erased
	orig := c.Entry
	known := []knownChunk{{e: planned, orig: &orig, origData: c.Data, data: pdata}}
	o := Output{FirstRecord: 100, Footer: bundlefmt.SettledFooter{Entries: []bundlefmt.Entry{{Stream: sid}}}}
	older, _ := erase(101) // an attempt before the second erasure
	for name, got := range map[string]bundlefmt.Entry{"as planned": planned, "as the source": orig, "a mix": older} {
		if err := matchSources(o, []bundlefmt.Entry{got}, known); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	stray, _ := erase(101, 104) // a tombstone where no erasure applies
	if err := matchSources(o, []bundlefmt.Entry{stray}, known); err == nil {
		t.Error("a tombstone no erasure asked for was accepted")
	}
	bad := older
	bad.DataCRC ^= 1
	if err := matchSources(o, []bundlefmt.Entry{bad}, known); err == nil {
		t.Error("a mix with the wrong DataCRC was accepted")
	}
}
