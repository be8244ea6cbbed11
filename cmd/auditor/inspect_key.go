package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

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
func cmdInspect(ctx context.Context, e env, args []string) int {
	fs, asJSON, records := inspectKeyFlags(e)
	key, fetch := inspectKeyForm(fs, args)
	if !fetch {
		return runInspect(args, e.stdout, e.stderr)
	}
	cfg, err := fs.Load(args)
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
	return inspectObject(obj, inspectOptions{Expect: exp, File: from + "/" + key, JSON: *asJSON, Records: *records},
		e.stdout, e.stderr)
}

// inspectKeyFlags are the key form's flags: --json, --records, --key, and
// the configuration keys.
func inspectKeyFlags(e env) (fs *cli.Flags, asJSON, records *bool) {
	fs = newFlags(e, "inspect")
	asJSON = fs.Bool("json", false, "print one JSON document instead of the human summary")
	records = fs.Bool("records", false, "add every record's details")
	fs.String("key", "", "the object's key: fetched from the configured store")
	return fs, asJSON, records
}

// inspectKeyForm tells the key form (--key and no FILE) from the file form
// by parsing args with the key form's flags, the configuration keys
// among them, through the one parser: help, a FILE, no --key, or a flag
// only the file form knows (with no --key) is the file form's, which
// runInspect parses and checks. It returns the key of the key form.
func inspectKeyForm(fs *cli.Flags, args []string) (key string, fetch bool) {
	files, err := cli.ParseInterspersed(fs.FlagSet, args)
	key = fs.Lookup("key").Value.String()
	switch {
	case errors.Is(err, flag.ErrHelp), len(files) > 0, key == "":
		return "", false
	}
	return key, true // a parse error is reported by Load, as the key form's
}
