package crc32c

import (
	"math/rand/v2"
	"testing"
)

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestChecksum(t *testing.T) {
	if got := Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("check value 0x%08x", got)
	}
	h := New()
	h.Write([]byte("1234"))
	h.Write([]byte("56789"))
	if got := h.Sum32(); got != 0xe3069283 {
		t.Fatalf("streaming check value 0x%08x", got)
	}
	if got := Update(Checksum([]byte("1234")), []byte("56789")); got != 0xe3069283 {
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
		want := Checksum(append(append([]byte(nil), a...), b...))
		if got := Combine(Checksum(a), Checksum(b), int64(len(b))); got != want {
			t.Fatalf("combine(%d, %d bytes) = 0x%08x, want 0x%08x", len(a), len(b), got, want)
		}
	}
	if got := Combine(0x12345678, 0, 0); got != 0x12345678 {
		t.Fatalf("combine with empty = 0x%08x", got)
	}
	// A combine over a length no test could hold in memory: associativity.
	x, y, z := uint32(0xdeadbeef), uint32(0x01020304), uint32(0xcafef00d)
	const lb, lc = 3 << 40, 5<<33 + 7
	left := Combine(Combine(x, y, lb), z, lc)
	right := Combine(x, Combine(y, z, lc), lb+lc)
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
		if got, want := Combine(Checksum(b[:cut]), Checksum(b[cut:]), int64(len(b)-cut)), Checksum(b); got != want {
			t.Fatalf("combine at %d of %d: %08x, want %08x", cut, len(b), got, want)
		}
	}
}

func BenchmarkCombine(b *testing.B) {
	for b.Loop() {
		_ = Combine(0x12345678, 0x9abcdef0, 4<<20+12345)
	}
}
