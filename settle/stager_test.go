package settle

import (
	"testing"

	"github.com/nova/auditor/pendingobj"
)

// TestStageReplacesAPartOfAnEarlierPlan: an intent resumed after the write
// path absorbed more plans the same key with other chunks, so a part
// number staged before now holds other bytes. Staging it again replaces the
// sidecar (the upload's part is replaced as well); refusing left the
// stream failing every cycle, for ever, under live traffic.
func TestStageReplacesAPartOfAnEarlierPlan(t *testing.T) {
	st, err := pendingobj.New(t.TempDir(), "s1", PartFormatID)
	if err != nil {
		t.Fatal(err)
	}
	s := &partStager{store: st, intent: 7, key: "buckets/b/streams/x/1/0~0"}
	if err := s.Stage(1, []byte("the first plan's part 1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(1, []byte("the first plan's part 1")); err != nil {
		t.Fatalf("the same bytes again (a plain resume): %v", err)
	}
	if err := s.Stage(1, []byte("a later plan's part 1, other chunks")); err != nil {
		t.Fatalf("a later plan's part: %v", err)
	}
	got, err := s.Load(1)
	if err != nil || string(got) != "a later plan's part 1, other chunks" {
		t.Fatalf("staged part after the replacement: %q %v", got, err)
	}
	if err := st.VerifyAll([]uint64{PartPosition(7, 1)}); err != nil {
		t.Fatal(err)
	}
}
