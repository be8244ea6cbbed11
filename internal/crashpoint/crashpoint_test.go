package crashpoint

import (
	"strings"
	"testing"
)

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

func TestFromEnvArmsCrashAndPause(t *testing.T) {
	const a, b Point = "test.a", "test.b"
	known := []Point{a, b}
	env := map[string]string{EnvVar: "test.a:2", PauseVar: "test.b"}
	s, err := FromEnv(func(k string) string { return env[k] }, known)
	if err != nil || s == nil || len(s.arms) != 2 {
		t.Fatalf("FromEnv: %+v %v", s, err)
	}
	if s.arms[0].name != a || s.arms[0].n != 2 || s.arms[1].name != b || s.arms[1].n != 1 {
		t.Fatalf("armed %+v %+v", s.arms[0], s.arms[1])
	}
	env[PauseVar] = "nope"
	if _, err := FromEnv(func(k string) string { return env[k] }, known); err == nil || !strings.Contains(err.Error(), PauseVar) {
		t.Fatalf("an unknown pause point: %v", err)
	}
}

// TestArmedNamesEachPointAndItsKind: Armed lists what the environment
// armed, each with its kind (crash, pause, stall) and count; nothing for a
// nil Set.
func TestArmedNamesEachPointAndItsKind(t *testing.T) {
	const a, b Point = "test.a", "test.b"
	known := []Point{a, b}
	env := map[string]string{EnvVar: "test.a:2", PauseVar: "test.b", StallVar: "test.a:7"}
	s, err := FromEnv(func(k string) string { return env[k] }, known)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Armed()
	want := []Armed{{"crash", a, 2}, {"pause", b, 1}, {"stall", a, 7}}
	if len(got) != len(want) {
		t.Fatalf("Armed() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Armed()[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if got[0].String() != "crash test.a:2" {
		t.Fatalf("String() = %q", got[0].String())
	}
	var none *Set
	if none.Armed() != nil {
		t.Fatal("a nil Set has armed points")
	}
}
