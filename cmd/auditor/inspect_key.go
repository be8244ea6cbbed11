package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/internal/config"
)

// cmdInspect is `auditor inspect FILE` (inspectObject via runInspect),
// or `auditor inspect --key KEY` without FILE, which fetches the object from
// the configured store (--fs-root or S3, the storage keys of
// config.example.yaml): the standard bucket first, then the express set.
func cmdInspect(ctx context.Context, e env, args []string) int {
	key, rest, fetch := inspectKeyOnly(args)
	if !fetch {
		return runInspect(args, e.stdout, e.stderr)
	}
	fs := newFlags(e, "inspect")
	asJSON := fs.Bool("json", false, "print one JSON document instead of the human summary")
	records := fs.Bool("records", false, "add every record's details")
	cfg, err := fs.Load(rest)
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

// inspectKeyOnly reports whether args name --key and no FILE (every other
// argument being a flag, with its value unless it is a boolean), returning
// the key and the rest.
func inspectKeyOnly(args []string) (key string, rest []string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case a == "--" || len(a) < 2 || a[0] != '-':
			return "", nil, false // a FILE: the file form
		case name == "key" && hasValue:
			key = value
		case name == "key":
			if i+1 >= len(args) {
				return "", nil, false
			}
			key = args[i+1]
			i++
		default:
			rest = append(rest, a)
			if !hasValue && !inspectBoolFlag(name) && i+1 < len(args) {
				rest = append(rest, args[i+1])
				i++
			}
		}
	}
	return key, rest, key != ""
}

// inspectBoolFlag reports whether the flag name of `inspect --key` takes
// no separate value: its own booleans and the boolean configuration keys.
func inspectBoolFlag(name string) bool {
	switch name {
	case "json", "records", "h", "help":
		return true
	}
	for _, k := range config.Keys() {
		if k.Name == name {
			return k.Bool
		}
	}
	return false
}
