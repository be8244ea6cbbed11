package main

import (
	"io"
	"testing"
)

// TestInspectKeyForm: the key form is told from the file form whatever the
// flags around --key, a boolean configuration key taking no value.
func TestInspectKeyForm(t *testing.T) {
	for _, c := range []struct {
		args []string
		key  string
		ok   bool
	}{
		{[]string{"--key", "k"}, "k", true},
		{[]string{"--key=k", "--json"}, "k", true},
		{[]string{"-key=k"}, "k", true},
		{[]string{"--s3-path-style", "--key", "k"}, "k", true},
		{[]string{"--bucket", "b", "--key", "k", "--records"}, "k", true},
		{[]string{"--bucket=b", "--key", "k"}, "k", true},
		{[]string{"file.bin", "--key", "k"}, "", false},
		{[]string{"--key", "k", "file.bin"}, "", false},
		{[]string{"--json", "file.bin"}, "", false},
		{[]string{"--settled", "file.bin"}, "", false},
		{[]string{"--key"}, "", false},
		{[]string{"-h"}, "", false},
	} {
		fs, _, _ := inspectKeyFlags(env{stdout: io.Discard, getenv: func(string) string { return "" }})
		key, ok := inspectKeyForm(fs, c.args)
		if ok != c.ok || key != c.key {
			t.Errorf("inspectKeyForm(%q) = %q, %v; want %q, %v", c.args, key, ok, c.key, c.ok)
		}
	}
}
