package bundlefmt

import (
	"math/rand/v2"
	"testing"
)

func TestChecksum(t *testing.T) {
	if got := CRC32C([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("check value 0x%08x", got)
	}
	h := NewCRC32C()
	h.Write([]byte("1234"))
	h.Write([]byte("56789"))
	if got := h.Sum32(); got != 0xe3069283 {
		t.Fatalf("streaming check value 0x%08x", got)
	}
	if got := UpdateCRC32C(CRC32C([]byte("1234")), []byte("56789")); got != 0xe3069283 {
		t.Fatalf("update check value 0x%08x", got)
	}
}

func TestCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 500; i++ {
		a, b := randBytes(r, r.IntN(3000)), randBytes(r, r.IntN(3000))
		if i%50 == 0 {
			b = randBytes(r, 1<<20+r.IntN(100))
		}
		want := CRC32C(append(append([]byte(nil), a...), b...))
		if got := CombineCRC32C(CRC32C(a), CRC32C(b), int64(len(b))); got != want {
			t.Fatalf("combine(%d, %d bytes) = 0x%08x, want 0x%08x", len(a), len(b), got, want)
		}
	}
	if got := CombineCRC32C(0x12345678, 0, 0); got != 0x12345678 {
		t.Fatalf("combine with empty = 0x%08x", got)
	}
	// A combine over a length no test could hold in memory: associativity.
	x, y, z := uint32(0xdeadbeef), uint32(0x01020304), uint32(0xcafef00d)
	const lb, lc = 3 << 40, 5<<33 + 7
	left := CombineCRC32C(CombineCRC32C(x, y, lb), z, lc)
	right := CombineCRC32C(x, CombineCRC32C(y, z, lc), lb+lc)
	if left != right {
		t.Fatalf("combine not associative: 0x%08x 0x%08x", left, right)
	}
}

// TestCombineCuts: every cut of random buffers combines back to the whole.
func TestCombineCuts(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 200; i++ {
		b := randBytes(r, r.IntN(5000))
		cut := r.IntN(len(b) + 1)
		if got, want := CombineCRC32C(CRC32C(b[:cut]), CRC32C(b[cut:]), int64(len(b)-cut)), CRC32C(b); got != want {
			t.Fatalf("combine at %d of %d: %08x, want %08x", cut, len(b), got, want)
		}
	}
}

func BenchmarkCombine(b *testing.B) {
	for b.Loop() {
		_ = CombineCRC32C(0x12345678, 0x9abcdef0, 4<<20+12345)
	}
}
