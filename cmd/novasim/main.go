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
// configuration error. This file dispatches; flags.go configures; each
// command has its own file.
package main

import (
	"context"
	"io"
	"os"

	"github.com/nova/auditor/internal/cli"
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

type command struct {
	summary string
	run     func(ctx context.Context, e env, args []string) int
}

func commands() map[string]command {
	return map[string]command{
		"setup": {"create stars and streams and record their content profile (seed, sizes)", cmdSetup},
		"write": {"write flights into a star's chain and absorb them, with faults on request", cmdWrite},
		"check": {"verify every record against the generator and the metastore and chains against the contract", cmdCheck},
		"erase": {"record erasures of a star's records (--stream --from --count, or --random N)", cmdErase},
	}
}

func main() {
	os.Exit(dispatch(context.Background(), env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, signals: notify()}, os.Args[1:]))
}

func dispatch(ctx context.Context, e env, args []string) int {
	cmds := commands()
	summaries := make(map[string]string, len(cmds))
	for n, c := range cmds {
		summaries[n] = c.summary
	}
	name, rest, code, ok := cli.Route("novasim", e.stdout, e.stderr, summaries, args)
	if !ok {
		return code
	}
	return cmds[name].run(ctx, e, rest)
}
