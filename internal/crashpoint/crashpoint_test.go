package crashpoint

import "testing"

func TestParseAndHit(t *testing.T) {
	const a, b Point = "test.a", "test.b"
	known := []Point{a, b}
	crashed := 0
	s, err := Parse(string(b)+":3", known, func() { crashed++ })
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		s.Hit(a) // other points never count
		s.Hit(b)
		want := 0
		if i >= 2 {
			want = 1
		}
		if crashed != want {
			t.Fatalf("after %d hits crashed %d times", i+1, crashed)
		}
	}
	for _, bad := range []string{"nope", string(b) + ":0", string(b) + ":x"} {
		if _, err := Parse(bad, known, func() {}); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	var none *Set
	none.Hit(b) // a nil set is a no-op
	if got, _ := FromEnv(func(string) string { return "" }, known); got != nil {
		t.Fatal("armed without the variable")
	}
}
