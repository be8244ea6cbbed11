package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
)

// cmdInspect is `auditor inspect FILE` (inspectObject via runInspect),
// or `auditor inspect --key KEY` without FILE, which fetches the object from
// the configured store (--fs-root or S3, the storage keys of
// config.example.yaml): the standard bucket first, then the express set.
func cmdInspect(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	o := defineInspectFlags(fs.FlagSet)
	return func(ctx context.Context, args []string) int {
		key, fetch := inspectKeyForm(fs, args)
		if !fetch {
			var shared []string
			c.PersistentFlags().VisitAll(func(f *pflag.Flag) {
				if f.Changed {
					shared = append(shared, "--"+f.Name)
				}
			})
			if len(shared) > 0 {
				return exitCode(e, config.Config{}, &config.Error{Field: "flags", Msg: fmt.Sprintf("%s: the configuration goes with the key form (--key KEY without FILE), which fetches the object from the store", strings.Join(shared, ", "))})
			}
			return runInspect(o, args, fs.Given, e.stdout, e.stderr)
		}
		for _, n := range []string{"settled", "transit", "epoch", "seq"} {
			if fs.Given(n) {
				return exitCode(e, config.Config{}, &config.Error{Field: n, Msg: "goes with FILE: the key form takes the kind and the expectations from --key"})
			}
		}
		cfg, err := fs.Load(nil)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		store, err := openStore(ctx, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		top, err := wire.Topology(cfg, store, nil)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		// An empty object is inspected (and found corrupt).
		from, obj, err := bundle.NewReader(top).Find(ctx, key)
		if err != nil {
			return exitCode(e, cfg, fmt.Errorf("inspect %s: %w", key, err))
		}
		exp, err := bundlefmt.ExpectFromKey(key)
		if err != nil {
			return exitCode(e, cfg, &config.Error{Field: "key", Msg: err.Error()})
		}
		// The bytes are decoded where they are: no temporary file, so a pod
		// with a read-only root filesystem can inspect.
		return inspectObject(obj, inspectOptions{Expect: exp, File: from + "/" + key, JSON: *o.asJSON, Records: *o.records},
			e.stdout, e.stderr)
	}
}

// inspectKeyForm tells the key form (--key and no FILE) from the file
// form, once cobra parsed the flags: args are the positional arguments.
// It returns the key of the key form.
func inspectKeyForm(fs *cli.Flags, args []string) (key string, fetch bool) {
	key = fs.Lookup("key").Value.String()
	if len(args) > 0 || key == "" {
		return "", false
	}
	return key, true
}
