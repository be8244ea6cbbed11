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
// budget's victims are kept on disk within the disk budget, read back
// whole, and the memory charged stays within the budget (spilled entries
// cost their bookkeeping); without one they are forgotten.
func TestTailCacheSpillsWhatMemoryEvicts(t *testing.T) {
	dir := t.TempDir()
	const n = 10 << 10
	c, err := newTailCache(4*(n+300)+20*300, dir, 20*tailSpillBlock*3) // 4 in memory and the bookkeeping of 20 spilled
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		c.put(fmt.Sprintf("k%02d", i), tailBytes(i, n))
		if _, _, mem, disk := c.stats(); mem > c.limit || disk > c.diskLimit {
			t.Fatalf("after %d puts: %d bytes of memory (budget %d), %d of disk (budget %d)", i+1, mem, c.limit, disk, c.diskLimit)
		}
	}
	memN, diskN, _, diskB := c.stats()
	// 12 KiB a file (3 blocks): 20 fit the disk budget; 4 in memory.
	if memN != 4 || diskN != 20 || diskB != 20*3*tailSpillBlock {
		t.Fatalf("held %d in memory, %d spilled (%d bytes): want 4 and 20", memN, diskN, diskB)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"+tailSpillSuffix))
	if len(files) != 20 {
		t.Fatalf("%d files in the spill directory, want 20", len(files))
	}
	for i := range 30 {
		obj, spilled := c.lookup(fmt.Sprintf("k%02d", i))
		switch {
		case i < 6:
			if obj != nil {
				t.Fatalf("k%02d: held, but it was the least recently used past both budgets", i)
			}
		case !bytes.Equal(obj, tailBytes(i, n)):
			t.Fatalf("k%02d: %d bytes read back, not the ones put", i, len(obj))
		case spilled != (i < 26):
			t.Fatalf("k%02d: spilled %v", i, spilled)
		}
	}
	// A drop removes the file; a file gone from under the cache is a miss.
	c.drop("k10")
	os.Remove(c.byKey["k11"].Value.(*tailEntry).file)
	if c.get("k10") != nil || c.get("k11") != nil {
		t.Fatal("a dropped or removed entry was served")
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*"+tailSpillSuffix)); len(files) != 18 {
		t.Fatalf("%d files after two drops, want 18", len(files))
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
}
