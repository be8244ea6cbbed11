package config

import "testing"

func TestSuggest(t *testing.T) {
	cands := []string{"migrate", "run", "serve", "status", "star", "denorm-linger", "ls"}
	for _, c := range []struct{ in, want string }{
		{"migrat", "migrate"}, {"sever", "serve"}, {"stra", "star"}, {"denorm-lingr", "denorm-linger"},
		{"rn", "run"}, {"statsu", "status"}, {"zzzzzz", ""}, {"x", ""}, {"verify-all", ""},
	} {
		if got := Suggest(c.in, cands); got != c.want {
			t.Errorf("Suggest(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
