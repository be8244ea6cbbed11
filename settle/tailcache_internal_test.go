package settle

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func tailBytes(i, n int) []byte { return bytes.Repeat([]byte{byte(i)}, n) }

// TestTailCacheSpillsWhatMemoryEvicts: with a spill directory, the memory
// budget's victims are kept on disk, in segments, within the disk budget
// (the oldest segment goes whole when it is full), read back whole, and
// the memory charged stays within the budget (spilled entries cost their
// bookkeeping); without one they are forgotten.
func TestTailCacheSpillsWhatMemoryEvicts(t *testing.T) {
	dir := t.TempDir()
	const n = 10 << 10
	c, err := newTailCache(4*(n+300)+20*300, dir, 20*n) // 4 in memory and the bookkeeping of 20 spilled
	if err != nil {
		t.Fatal(err)
	}
	c.segBytes = 4 * n // segments of 4 entries
	for i := range 30 {
		c.put(fmt.Sprintf("k%02d", i), tailBytes(i, n))
		if _, _, mem, disk := c.stats(); mem > c.limit || disk > c.diskLimit {
			t.Fatalf("after %d puts: %d bytes of memory (budget %d), %d of disk (budget %d)", i+1, mem, c.limit, disk, c.diskLimit)
		}
	}
	// k26..k29 in memory; k00..k25 spilled in segments of four: placing
	// k20 and k24 found the disk full and took the two oldest segments
	// (k00..k07) with them.
	memN, diskN, _, diskB := c.stats()
	if memN != 4 || diskN != 18 || diskB != 18*n {
		t.Fatalf("held %d in memory, %d spilled (%d bytes): want 4 and 18 (%d bytes)", memN, diskN, diskB, 18*n)
	}
	segFiles := func() int {
		files, _ := filepath.Glob(filepath.Join(dir, "*"+tailSpillSuffix))
		return len(files)
	}
	if got := segFiles(); got != 5 {
		t.Fatalf("%d files in the spill directory, want 5 segments", got)
	}
	for i := range 30 {
		obj, spilled := c.lookup(fmt.Sprintf("k%02d", i))
		switch {
		case i < 8:
			if obj != nil {
				t.Fatalf("k%02d: held, but its segment was the oldest when the disk was full", i)
			}
		case !bytes.Equal(obj, tailBytes(i, n)):
			t.Fatalf("k%02d: %d bytes read back, not the ones put", i, len(obj))
		case spilled != (i < 26):
			t.Fatalf("k%02d: spilled %v", i, spilled)
		}
	}
	// Dropping a segment's every entry removes its file; the others stay.
	for i := 8; i < 12; i++ {
		c.drop(fmt.Sprintf("k%02d", i))
	}
	if got := segFiles(); got != 4 {
		t.Fatalf("%d segments after a segment's entries were dropped, want 4", got)
	}
	if _, diskN, _, diskB := c.stats(); diskN != 14 || diskB != 14*n {
		t.Fatalf("%d spilled (%d bytes) after four drops, want 14", diskN, diskB)
	}
	// A segment that is not what was written (cut short under the cache)
	// serves nothing from its lost part: a miss, and the entry goes.
	seg := c.byKey["k13"].Value.(*tailEntry).seg
	if err := os.Truncate(seg.path, n+n/2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.get("k12"), tailBytes(12, n)) {
		t.Fatal("k12, whole before the cut, is not served")
	}
	if c.get("k13") != nil {
		t.Fatal("an entry cut short was served")
	}
	if _, ok := c.byKey["k13"]; ok {
		t.Fatal("an entry cut short is still held")
	}
	// A new cache over the directory starts cold and clears it (but not
	// files of other names).
	if err := os.WriteFile(filepath.Join(dir, "keep.me"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c2, err := newTailCache(1<<20, dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if c2.get("k20") != nil {
		t.Fatal("a restarted cache served a file it did not write")
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 1 {
		t.Fatalf("%v left in the spill directory, want only keep.me", files)
	}

	// Without a spill directory, the victims are forgotten.
	c3, _ := newTailCache(4*(n+300), "", 0)
	for i := range 30 {
		c3.put(fmt.Sprintf("k%02d", i), tailBytes(i, n))
	}
	if memN, diskN, _, _ := c3.stats(); memN != 4 || diskN != 0 || c3.get("k00") != nil {
		t.Fatalf("no spill: %d in memory, %d spilled", memN, diskN)
	}
}

// TestTailCacheSpillCostsNoFilePerTail: spilling many small tails opens a
// file per segment, not per tail: the directory holds few files however
// many tails were spilled, and a tail read back is the one put.
func TestTailCacheSpillCostsNoFilePerTail(t *testing.T) {
	dir := t.TempDir()
	c, err := newTailCache(2<<20, dir, 64<<20) // bookkeeping of 5,000 (1.3 MiB) and some in memory
	if err != nil {
		t.Fatal(err)
	}
	const tails = 5000
	for i := range tails {
		c.put(fmt.Sprintf("t%05d", i), tailBytes(i, 1000+i%700))
	}
	memN, diskN, _, diskB := c.stats()
	files, _ := filepath.Glob(filepath.Join(dir, "*"+tailSpillSuffix))
	t.Logf("%d tails in memory, %d spilled (%d bytes) in %d files of up to %d bytes", memN, diskN, diskB, len(files), c.segBytes)
	if memN+diskN != tails || diskN < tails/2 {
		t.Fatalf("%d tails in memory and %d spilled of %d put", memN, diskN, tails)
	}
	if want := int(diskB/c.segBytes) + 1; len(files) > want {
		t.Fatalf("%d files for %d bytes in segments of %d: want at most %d", len(files), diskB, c.segBytes, want)
	}
	for _, i := range []int{0, 1234, 4000} {
		if got := c.get(fmt.Sprintf("t%05d", i)); !bytes.Equal(got, tailBytes(i, 1000+i%700)) {
			t.Fatalf("t%05d: %d bytes read back, not the ones put", i, len(got))
		}
	}
	// Closed (the Settler done): the segments are closed and removed, and
	// the cache holds in memory only from then on.
	c.close()
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Fatalf("%v left after close", files)
	}
	if memN, diskN, mem, disk := c.stats(); memN+diskN != 0 || mem != 0 || disk != 0 || c.get("t04000") != nil {
		t.Fatalf("after close: %d in memory, %d spilled, %d and %d bytes", memN, diskN, mem, disk)
	}
	for i := range 100 {
		c.put(fmt.Sprintf("u%03d", i), tailBytes(i, 50<<10))
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 || !bytes.Equal(c.get("u099"), tailBytes(99, 50<<10)) {
		t.Fatalf("after close, puts spilled to %v, or the newest is not held", files)
	}
}

// TestTailCacheBookkeepingWithinBudget: many tiny spilled tails cannot
// hold more bookkeeping than the memory budget: the oldest spilled go.
func TestTailCacheBookkeepingWithinBudget(t *testing.T) {
	c, err := newTailCache(10*(tailEntryOverhead+8), t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		c.put(fmt.Sprintf("key%05d", i), tailBytes(i, 1))
	}
	memN, diskN, mem, _ := c.stats()
	if mem > c.limit || memN+diskN > 10 {
		t.Fatalf("%d bytes charged to a %d budget, %d entries", mem, c.limit, memN+diskN)
	}
	if !bytes.Equal(c.get("key00099"), tailBytes(99, 1)) {
		t.Fatal("the newest entry is gone")
	}
}

// TestTailCacheConcurrent: puts, gets and drops from many goroutines
// (run with -race) never serve bytes that are not the key's.
func TestTailCacheConcurrent(t *testing.T) {
	c, err := newTailCache(64<<10, t.TempDir(), 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := (g*7 + i) % 50
				key := fmt.Sprintf("k%02d", k)
				switch i % 3 {
				case 0:
					c.put(key, tailBytes(k, 3000+k))
				case 1:
					if obj := c.get(key); obj != nil && !bytes.Equal(obj, tailBytes(k, 3000+k)) {
						t.Errorf("%s: wrong bytes", key)
					}
				case 2:
					if i%9 == 2 {
						c.drop(key)
					}
				}
			}
		}()
	}
	wg.Wait()
	_, _, mem, disk := c.stats()
	if mem > c.limit || disk > c.diskLimit {
		t.Fatalf("%d bytes of memory (budget %d), %d of disk (budget %d)", mem, c.limit, disk, c.diskLimit)
	}

	// A close while puts and gets go on (a cycle given up on still runs
	// when its star is released): no race, no wrong bytes, nothing left
	// on disk by the puts after it.
	dir := t.TempDir()
	c, err = newTailCache(64<<10, dir, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	var closed sync.WaitGroup
	closed.Add(1)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				k := (g*11 + i) % 40
				key := fmt.Sprintf("k%02d", k)
				c.put(key, tailBytes(k, 3000+k))
				if obj := c.get(key); obj != nil && !bytes.Equal(obj, tailBytes(k, 3000+k)) {
					t.Errorf("%s: wrong bytes", key)
				}
				if g == 0 && i == 100 {
					c.close()
					closed.Done()
				}
			}
		}()
	}
	wg.Wait()
	closed.Wait()
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Fatalf("%d files left after close and the puts after it", len(files))
	}
	if _, diskN, _, disk := c.stats(); diskN != 0 || disk != 0 {
		t.Fatalf("after close: %d spilled, %d bytes of disk", diskN, disk)
	}
}

// TestTailCacheSegmentEdges: a tail larger than a segment is spilled in
// one of its own; the segment being written is removed too when its last
// tail is dropped.
func TestTailCacheSegmentEdges(t *testing.T) {
	dir := t.TempDir()
	c, err := newTailCache(8<<10, dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	c.segBytes = 16 << 10
	c.put("big", tailBytes(1, 40<<10))   // larger than the memory and a segment: spilled in its own
	c.put("small", tailBytes(2, 4<<10))  // in memory
	c.put("small2", tailBytes(3, 6<<10)) // in memory; "small" spills, in a new segment
	if got := c.get("big"); !bytes.Equal(got, tailBytes(1, 40<<10)) {
		t.Fatalf("the tail larger than a segment: %d bytes read back", len(got))
	}
	if _, spilled := c.lookup("small"); !spilled {
		t.Fatal("small was not spilled")
	}
	segs := func() int {
		files, _ := filepath.Glob(filepath.Join(dir, "*"+tailSpillSuffix))
		return len(files)
	}
	if n := segs(); n != 2 {
		t.Fatalf("%d segments, want 2 (the large tail's own, and the current one)", n)
	}
	c.drop("big")
	if n := segs(); n != 1 {
		t.Fatalf("%d segments after the large tail's drop, want 1", n)
	}
	c.drop("small") // the current segment's last tail
	if n := segs(); n != 0 {
		t.Fatalf("%d segments left after every spilled tail was dropped", n)
	}
	if _, diskN, _, disk := c.stats(); diskN != 0 || disk != 0 {
		t.Fatalf("%d spilled, %d bytes of disk after every drop", diskN, disk)
	}
	c.put("again", tailBytes(4, 20<<10)) // a new segment is begun
	if got := c.get("again"); !bytes.Equal(got, tailBytes(4, 20<<10)) {
		t.Fatalf("after the current segment was removed: %d bytes read back", len(got))
	}
}

// BenchmarkTailCacheSpill: the settle's pattern on a star of trickle
// streams whose tails do not fit the memory: each settle drops the
// stream's old tail and puts its new one, and the memory spills its
// least recently used. It reports the time a put takes (the spill's
// writes and the dropped tails' removal included: on one core, about its
// CPU, mostly the system calls').
func BenchmarkTailCacheSpill(b *testing.B) {
	c, err := newTailCache(1<<20, b.TempDir(), 256<<20)
	if err != nil {
		b.Fatal(err)
	}
	const streams = 2000
	tail := tailBytes(7, 3<<10)
	b.SetBytes(int64(len(tail)))
	b.ResetTimer()
	for i := range b.N {
		s := i % streams
		c.drop(fmt.Sprintf("s%05d~%d", s, i/streams-1))
		c.put(fmt.Sprintf("s%05d~%d", s, i/streams), tail)
	}
}
