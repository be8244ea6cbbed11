// Command novasim plays Nova's write path against the auditor's metastore
// and object store (package sim), so tests, benchmarks and demos
// settle real slots and real refs, and checks every settled byte:
//
//	novasim setup   create stars and streams and record the content profile
//	novasim write   write flights into a star's chain and absorb them
//	novasim check   verify every record and the contract's invariants
//	novasim erase   record erasures (one range, or --random N)
//
// It takes the auditor's database and storage flags with the same meaning
// (and the same NOVA_AUDITOR_* environment and --config file), so one
// configuration drives both. A session against the file backend:
//
//	export NOVA_AUDITOR_DATABASE_URL=postgres://... NOVA_AUDITOR_FS_ROOT=/tmp/nova
//	novasim setup --migrate --star s1 --streams 500 --express-share 0.2 \
//	    --s3-express-buckets za=x-za,zb=x-zb --location za --seed 7
//	novasim write --flights 2000 --fail-failover 0.01 --fail-lost 0.02 ...
//	novasim check
//
// The content profile (seed, --record-bytes, --headers, --empty-share) is
// chosen at setup and recorded per star in nova.sim_stars, a table novasim
// adds beside the contract's: write and check read it from there, so they
// take no content flags and check needs no seed. Without --star, write and
// check cover every star novasim set up (write runs one writer per star).
//
// Exit codes: 0 clean, 1 runtime failure or check findings, 2 usage or
// configuration error, 5 the database could not be reached. This file
// builds the command tree (on cobra, with internal/cli's help layout);
// flags.go configures; each command has its own file.
package main

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
)

// Exit codes.
const (
	exitOK      = cli.ExitOK
	exitFailure = cli.ExitFailure
	exitUsage   = cli.ExitUsage
)

// env is what every subcommand gets from the process.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// signals delivers interrupts: write drains on the first and aborts on
	// the second; the others abort on the first.
	signals <-chan os.Signal
}

// runFunc runs a command, its flags parsed, with its positional
// arguments, and returns its exit code.
type runFunc func(ctx context.Context, args []string) int

type command struct {
	// summary is the one-line synopsis, description what the command
	// does, example one command line.
	summary, description, example string
	// build defines the command's flags on c and returns what runs it.
	build func(e env, c *cobra.Command) runFunc
}

func commands() map[string]command {
	return map[string]command{
		"setup": {summary: "create stars and streams and record their content profile (seed, sizes)",
			description: "Create the star (and an express star for --express-share) and its streams, and record the content profile (seed, record sizes, headers) that write and check read back; --migrate applies the schema first.",
			build:       cmdSetup,
			example:     "novasim setup --migrate --star s1 --streams 500 --express-share 0.2 --seed 7"},
		"write": {summary: "write flights into a star's chain and absorb them, with faults on request",
			description: "Write flights into the chains of the stars novasim set up (or --star) and absorb them, as Nova's write path does, until --flights, --bytes or --duration is reached or it is interrupted, with the faults asked for (--fail-*).",
			build:       cmdWrite,
			example:     "novasim write --star s1 --flights 2000 --fail-failover 0.01 --fail-lost 0.02"},
		"check": {summary: "verify every record against the generator and the metastore and chains against the contract",
			description: "Verify every record of the stars novasim set up (or --star) against the generator, and the metastore and the chains against the contract's invariants; findings exit 1.",
			build:       cmdCheck,
			example:     "novasim check --star s1 --json"},
		"erase": {summary: "record erasures of a star's records (--stream --from --count, or --random N)",
			description: "Record erasures of a star's records as the write path's users would: one range (--stream, --from, --count), or --random N of them; the auditor's next cycle applies them.",
			build:       cmdErase,
			example:     "novasim erase --star s1 --random 10 --seed 3"},
	}
}

func main() {
	os.Exit(dispatch(context.Background(), env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, signals: notify()}, os.Args[1:]))
}

// dispatch runs the command args name and returns the exit code.
func dispatch(ctx context.Context, e env, args []string) int {
	root := cli.NewRoot("novasim", "play Nova's write path against the auditor's metastore and object store",
		"novasim plays Nova's write path against the auditor's metastore and object store, so tests, benchmarks and demos settle real slots and real refs, and checks every settled byte. It takes the auditor's database and storage flags, environment and --config file.")
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.Annotations = map[string]string{cli.FooterAnnotation: exitCodesHelp}
	for name, c := range commands() {
		cmd := &cobra.Command{
			Use:               name + " [flags]",
			Short:             c.summary,
			Long:              c.description,
			Example:           "  " + c.example,
			Args:              cli.NoArgs,
			ValidArgsFunction: cobra.NoFileCompletions,
			Annotations:       map[string]string{cli.FooterAnnotation: exitCodesHelp},
		}
		run := c.build(e, cmd)
		cmd.RunE = func(_ *cobra.Command, args []string) error { return cli.Exit(run(ctx, args)) }
		root.AddCommand(cmd)
	}
	return cli.Execute(root, args, e.stderr, config.Config{}.Scrub)
}

// exitCodesHelp ends every command's help.
const exitCodesHelp = `exit codes:
  0  clean
  1  runtime failure or check findings
  2  usage or configuration error
  5  the database could not be reached
`
