package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/cli"
)

const inspectUsage = `usage: auditor inspect [flags] FILE
       auditor inspect --key KEY [--json] [--records] [storage flags]

Decode and validate a chain slot (flight or poison) or a settled object, every
rule of docs/format.md including every DataCRC, and print a summary.

The first form reads FILE (with --key, the key it was stored under gives the
kind and the expectations). The second form, --key without FILE, fetches the
object with that key from the configured store (--fs-root, or S3 with
--s3-endpoint, --bucket, --key-prefix and the express set: the storage keys
of config.example.yaml): the standard bucket first, then the express
buckets. It reads into memory and writes no file, so it works on a
read-only filesystem.

Exit status: 0 valid, 3 corrupt (including a checksum mismatch), 4 unsupported
format version, 2 usage, 1 the object could not be read.

Flags:
`

// runInspect implements `auditor inspect`. Flags may come before or after
// FILE. --key names the object's key; it is used, with FILE, as the source
// of the kind and of the epoch/seq or stream/first-record expectations.
func runInspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	usageTo := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprint(w, inspectUsage)
		fs.PrintDefaults()
		fmt.Fprint(w, commandExitsHelp("inspect"))
		fs.SetOutput(stderr)
	}
	fs.Usage = func() { usageTo(stderr) }
	jsonOut := fs.Bool("json", false, "print one JSON document instead of the human summary")
	records := fs.Bool("records", false, "add every record's length, timestamp, batch end, header count and content bytes")
	settled := fs.Bool("settled", false, "assert that FILE is a settled object")
	transit := fs.Bool("transit", false, "assert that FILE is a chain slot (flight or poison); needs --epoch and --seq, or --key")
	epoch := fs.Uint64("epoch", 0, "with --transit: the slot epoch of the slot's key")
	seq := fs.Uint64("seq", 0, "with --transit: the seq of the slot's key")
	key := fs.String("key", "", "the object's key (slot or settled, store prefix allowed): kind and expectations come from it")

	if slices.Contains(args, "-h") || slices.Contains(args, "--help") || slices.Contains(args, "-help") {
		usageTo(stdout) // help asked for is output
		return exitOK
	}
	files, err := cli.ParseInterspersed(fs, args)
	if err != nil {
		return exitUsage // the flag package has printed why
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "inspect: "+format+"\n", a...)
		fs.Usage()
		return exitUsage
	}
	if len(files) != 1 {
		return usage("want exactly one FILE, got %d", len(files))
	}
	if *settled && *transit {
		return usage("--settled and --transit are exclusive")
	}
	if (set["epoch"] || set["seq"]) && !*transit {
		return usage("--epoch and --seq go with --transit")
	}
	if set["epoch"] != set["seq"] {
		return usage("--transit needs both --epoch and --seq")
	}

	var exp bundlefmt.Expect
	switch {
	case *key != "":
		if set["epoch"] {
			return usage("give the slot's --key or its --epoch/--seq, not both")
		}
		if exp, err = bundlefmt.ExpectFromKey(*key); err != nil {
			return usage("--key: %v", err)
		}
		if *settled && exp.Kind != bundlefmt.KindSettled || *transit && exp.Kind != bundlefmt.KindSlot {
			return usage("--key %s is not the key of a %s object", *key, map[bool]string{true: "settled", false: "transit"}[*settled])
		}
	case *transit:
		if !set["epoch"] {
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
	return inspectObject(obj, inspectOptions{Expect: exp, File: files[0], JSON: *jsonOut, Records: *records}, stdout, stderr)
}
