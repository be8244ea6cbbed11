package main

import (
	"slices"
	"testing"
)

// TestInspectKeyOnly: the key form is told from the file form whatever the
// flags around --key, a boolean configuration key taking no value.
func TestInspectKeyOnly(t *testing.T) {
	for _, c := range []struct {
		args []string
		key  string
		rest []string
		ok   bool
	}{
		{[]string{"--key", "k"}, "k", nil, true},
		{[]string{"--key=k", "--json"}, "k", []string{"--json"}, true},
		{[]string{"-key=k"}, "k", nil, true},
		{[]string{"--s3-path-style", "--key", "k"}, "k", []string{"--s3-path-style"}, true},
		{[]string{"--bucket", "b", "--key", "k", "--records"}, "k", []string{"--bucket", "b", "--records"}, true},
		{[]string{"--bucket=b", "--key", "k"}, "k", []string{"--bucket=b"}, true},
		{[]string{"file.bin", "--key", "k"}, "", nil, false},
		{[]string{"--key", "k", "file.bin"}, "", nil, false},
		{[]string{"--json", "file.bin"}, "", nil, false},
		{[]string{"--key"}, "", nil, false},
	} {
		key, rest, ok := inspectKeyOnly(c.args)
		if ok != c.ok || (ok && (key != c.key || !slices.Equal(rest, c.rest))) {
			t.Errorf("inspectKeyOnly(%q) = %q, %q, %v; want %q, %q, %v", c.args, key, rest, ok, c.key, c.rest, c.ok)
		}
	}
}
