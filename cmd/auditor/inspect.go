package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/nova/auditor/bundlefmt"
)

// inspectDescription is `auditor inspect`'s help.
const inspectDescription = `Decode and validate a chain slot (flight or poison) or a settled object, every
rule of docs/format.md including every DataCRC, and print a summary.

The first form reads FILE (with --key, the key it was stored under gives the
kind and the expectations). The second form, auditor inspect --key KEY
without FILE, fetches the object with that key from the configured store
(--fs-root, or S3 with --s3-endpoint, --bucket, --key-prefix and the express
set: the storage keys of config.example.yaml): the standard bucket first,
then the express buckets. It reads into memory and writes no file, so it
works on a read-only filesystem. Flags may come before or after FILE.`

// inspectFlags are `auditor inspect`'s own flags; settled, transit,
// epoch and seq are the file form's only.
type inspectFlags struct {
	asJSON, records, settled, transit *bool
	epoch, seq                        *uint64
	key                               *string
}

// defineInspectFlags defines inspect's own flags on fs.
func defineInspectFlags(fs *pflag.FlagSet) inspectFlags {
	return inspectFlags{
		asJSON:  fs.Bool("json", false, "print one JSON document instead of the human summary"),
		records: fs.Bool("records", false, "add every record's length, timestamp, batch end, header count and content bytes"),
		key:     fs.String("key", "", "the object's `KEY` (slot or settled, store prefix allowed): kind and expectations come from it; without FILE, the object is fetched from the configured store"),
		settled: fs.Bool("settled", false, "assert that FILE is a settled object"),
		transit: fs.Bool("transit", false, "assert that FILE is a chain slot (flight or poison); needs --epoch and --seq, or --key"),
		epoch:   fs.Uint64("epoch", 0, "with --transit: the slot `EPOCH` of the slot's key"),
		seq:     fs.Uint64("seq", 0, "with --transit: the `SEQ` of the slot's key"),
	}
}

// runInspect implements the file form of `auditor inspect`, its flags
// parsed: files are the positional arguments, set tells whether a flag
// was given.
func runInspect(o inspectFlags, files []string, set func(string) bool, stdout, stderr io.Writer) int {
	settled, transit, epoch, seq, key := o.settled, o.transit, o.epoch, o.seq, *o.key
	var err error
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "inspect: "+format+"\n", a...)
		fmt.Fprintln(stderr, "Run 'auditor inspect --help' for usage.")
		return exitUsage
	}
	if len(files) != 1 {
		return usage("want exactly one FILE, got %d", len(files))
	}
	if *settled && *transit {
		return usage("--settled and --transit are exclusive")
	}
	if (set("epoch") || set("seq")) && !*transit {
		return usage("--epoch and --seq go with --transit")
	}
	if set("epoch") != set("seq") {
		return usage("--transit needs both --epoch and --seq")
	}

	var exp bundlefmt.Expect
	switch {
	case key != "":
		if set("epoch") {
			return usage("give the slot's --key or its --epoch/--seq, not both")
		}
		if exp, err = bundlefmt.ExpectFromKey(key); err != nil {
			return usage("--key: %v", err)
		}
		if *settled && exp.Kind != bundlefmt.KindSettled || *transit && exp.Kind != bundlefmt.KindSlot {
			return usage("--key %s is not the key of a %s object", key, map[bool]string{true: "settled", false: "transit"}[*settled])
		}
	case *transit:
		if !set("epoch") {
			return usage("--transit needs --epoch and --seq, or --key")
		}
		exp = bundlefmt.Expect{Kind: bundlefmt.KindSlot, Epoch: *epoch, Seq: *seq, CheckKey: true}
	case *settled:
		exp = bundlefmt.Expect{Kind: bundlefmt.KindSettled}
	}

	obj, err := os.ReadFile(files[0])
	if err != nil {
		fmt.Fprintf(stderr, "inspect: %v\n", err)
		return exitFailure
	}
	return inspectObject(obj, inspectOptions{Expect: exp, File: files[0], JSON: *o.asJSON, Records: *o.records}, stdout, stderr)
}
