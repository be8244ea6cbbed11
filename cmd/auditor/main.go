// Command auditor is Nova's singleton-per-star background settler: it settles
// due streams into create-once settled objects, trims and reaps transit
// slots, and serves its operator surface (docs/operations.md#operator-surface). This file
// only dispatches subcommands; config.go loads configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/migrations"
)

// env is what every subcommand gets from the process.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

type command struct {
	summary string
	run     func(ctx context.Context, e env, args []string) int
	// exits are the codes of the exit-code table the command may return,
	// which its -h lists (TestEveryCommandRefusesBadInput holds the
	// command to them).
	exits []int
	// example is one command line, which its -h shows.
	example string
}

func commands() map[string]command {
	// The codes of a command that reads the metastore and nothing else
	// that can fail apart.
	db := []int{exitOK, exitFailure, exitUsage, exitUnreachable}
	return map[string]command{
		"migrate":     {"apply the embedded schema migrations to the metastore", cmdMigrate, db, "auditor migrate --database-url postgres://nova_migrator@db:5432/nova --status"},
		"run":         {"run one cycle (--once) and exit; --dry-run prints the plan, made with the leader's recorded policy (--json)", cmdRun, append(slices.Clip(db), exitRewound), "auditor run --once --star s1 --database-url postgres://nova_auditor@db:5432/nova --dry-run --json"},
		"serve":       {"run the daemon: lease, schedule, admin requests, HTTP", cmdServe, []int{exitOK, exitFailure, exitUsage, exitFindings}, "auditor serve --star s1 --config /etc/nova/auditor.yaml"},
		"version":     {"print the binary's schema version", cmdVersion, []int{exitOK, exitUsage}, "auditor version"},
		"inspect":     {"decode and print a slot or settled object (FILE, or --key KEY fetched from the store)", cmdInspect, []int{exitOK, exitFailure, exitUsage, exitFindings, exitUnsupported}, "auditor inspect --star s1 --key buckets/nova/streams/0f3c2b1a000040008000000000000001/00000000000000000001/00000000000000000000~0 --records"},
		"crashpoints": {"list the fault-injection points (for tests) NOVA_AUDITOR_CRASHPOINT, NOVA_AUDITOR_PAUSEPOINT and NOVA_AUDITOR_STALLPOINT=name[:n] can arm; not in the top-level help", cmdCrashpoints, []int{exitOK, exitUsage}, "NOVA_AUDITOR_CRASHPOINT=settle.after-complete:2 auditor run --once --star s1"},
		"trigger":     {"ask the leader for a cycle now (--stream ID: settle that stream regardless of linger); --wait: until the cycle finished, exit with its outcome", cmdTrigger, append(slices.Clip(db), exitTimeout), "auditor trigger --star s1 --stream 0f3c2b1a-0000-4000-8000-000000000001 --wait --timeout 10m"},
		"pause":       {"pause the star: the leader keeps its lease and runs no cycle", cmdPause, db, "auditor pause --star s1"},
		"resume":      {"resume a paused or halted star", cmdResume, db, "auditor resume --star s1"},
		"release":     {"lift a stream's quarantine (--stream ID)", cmdRelease, db, "auditor release --star s1 --stream 0f3c2b1a-0000-4000-8000-000000000001"},
		"erase":       {"record an erasure of records of a stream (--stream ID --from R --count N); the next cycle applies it; --dry-run: what it would rewrite; --wait: until applied", cmdErase, append(slices.Clip(db), exitTimeout), "auditor erase --star s1 --stream 0f3c2b1a-0000-4000-8000-000000000001 --from 100 --count 5 --dry-run"},
		"status":      {"leader, lag, due streams, trim, backlog, quarantine, last runs (--json); --fleet: members, stars per member, unowned stars, moves; --check: exit non-zero when the star needs an operator", cmdStatus, db, "auditor status --star s1 --check --max-quarantined 0"},
		"ls":          {"list the catalog entries of the star's streams (--stream ID: one): key, records, revision, size, class, bucket (--json); reads only", cmdLs, db, "auditor ls --star s1 --stream 0f3c2b1a-0000-4000-8000-000000000001 --json"},
		"verify":      {"fsck of the catalog: every entry's object exists, decodes, and tiles its stream; --strays: also the objects no metadata names", cmdVerify, append(slices.Clip(db), exitFindings), "auditor verify --star s1 --sample 0.01 --rate 50MiB"},
		"reconcile":   {"rebuild the star's metastore view from its object store after a restore (--apply; a dry run without)", cmdReconcile, append(slices.Clip(db), exitFindings), "auditor reconcile --star s1 --apply"},
		"doctor":      {"check the metastore and every bucket before deploying: one line per check (--json)", cmdDoctor, append(slices.Clip(db), exitFindings), "auditor doctor --star s1 --json"},
		"completion":  {"print a shell completion script (completion bash)", cmdCompletion, []int{exitOK, exitUsage}, "source <(auditor completion bash)"},
	}
}

// testingCommands are the commands of the fault-injection hooks, for
// tests: they run as any other, but the top-level help (auditor --help,
// auditor help) and the completion script do not list them.
var testingCommands = map[string]bool{"crashpoints": true}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, e env, args []string) int {
	cmds := commands()
	summaries := make(map[string]string, len(cmds))
	for n, c := range cmds {
		if !testingCommands[n] {
			summaries[n] = c.summary
		}
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		return cmdVersion(ctx, e, args[1:])
	}
	if len(args) > 0 && testingCommands[args[0]] {
		return cmds[args[0]].run(ctx, e, args[1:])
	}
	name, rest, code, ok := cli.Route("auditor", e.stdout, e.stderr, summaries, args)
	if !ok {
		if code == exitOK {
			fmt.Fprintln(e.stdout, "  --version    print the version (the version command)")
			writeExitCodes(e.stdout)
		}
		return code
	}
	return cmds[name].run(ctx, e, rest)
}

// exitCode maps an error to the process exit code and prints it: usage,
// configuration and schema-version problems (a database refusing the URL
// among them) are 2, a database that does not answer 5, the rest 1.
func exitCode(e env, cfg config.Config, err error) int {
	if err == nil || errors.Is(err, cli.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(e.stderr, "auditor: %s\n", cfg.Scrub(err.Error()))
	var rewound *cycle.RewoundError
	switch {
	case errors.As(err, &rewound):
		return exitRewound
	case errors.Is(err, catalog.ErrUnreachable):
		return exitUnreachable
	case errors.Is(err, config.ErrConfig),
		errors.Is(err, catalog.ErrRefused),
		errors.Is(err, migrations.ErrDatabaseBehind),
		errors.Is(err, migrations.ErrDatabaseNewer):
		return exitUsage
	}
	return exitFailure
}

func cmdVersion(_ context.Context, e env, args []string) int {
	if code, ok := noFlags(e, "version", args); !ok {
		return code
	}
	fmt.Fprintf(e.stdout, "auditor %s (schema version %d)\n", buildVersion(), migrations.Latest())
	return exitOK
}

func cmdCrashpoints(_ context.Context, e env, args []string) int {
	if code, ok := noFlags(e, "crashpoints", args); !ok {
		return code
	}
	for _, n := range crashPoints() {
		fmt.Fprintln(e.stdout, n)
	}
	return exitOK
}

// noFlags parses the arguments of a command that takes none (version,
// crashpoints): -h prints its usage (ok false, exit 0); a flag or an
// argument is a usage error naming it (exit 2), as on every command.
func noFlags(e env, name string, args []string) (code int, ok bool) {
	fs := flag.NewFlagSet("auditor "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		cli.PrintFlags(e.stdout, fs)
		fmt.Fprint(e.stdout, commandExitsHelp(name))
		return exitOK, false
	case err != nil:
		return exitCode(e, config.Config{}, &config.Error{Field: "flags", Msg: err.Error()}), false
	case fs.NArg() > 0:
		return exitCode(e, config.Config{}, &config.Error{Field: "flags", Msg: fmt.Sprintf("unexpected argument %q: auditor %s takes none", fs.Arg(0), name)}), false
	}
	return exitOK, true
}
