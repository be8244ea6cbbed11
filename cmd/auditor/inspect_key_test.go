package main

import (
	"context"
	"io"
	"testing"

	"github.com/spf13/cobra"
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
		{[]string{"--s3-path-style", "--key", "k"}, "k", true},
		{[]string{"--bucket", "b", "--key", "k", "--records"}, "k", true},
		{[]string{"--bucket=b", "--key", "k"}, "k", true},
		{[]string{"file.bin", "--key", "k"}, "", false},
		{[]string{"--key", "k", "file.bin"}, "", false},
		{[]string{"--json", "file.bin"}, "", false},
		{[]string{"--settled", "file.bin"}, "", false},
		{[]string{"--key", "k", "--", "--file.bin"}, "", false},
	} {
		cmd := &cobra.Command{Use: "inspect"}
		e := env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
		fs := newFlags(e, cmd)
		defineInspectFlags(fs.FlagSet)
		cmd.RunE = func(_ *cobra.Command, args []string) error {
			key, ok := inspectKeyForm(fs, args)
			if ok != c.ok || key != c.key {
				t.Errorf("inspectKeyForm(%q) = %q, %v; want %q, %v", c.args, key, ok, c.key, c.ok)
			}
			return nil
		}
		cmd.SetArgs(c.args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Errorf("%q: %v", c.args, err)
		}
	}
}
