// Command auditor is Nova's singleton-per-star background settler: it settles
// due streams into create-once settled objects, trims and reaps transit
// slots, and serves its operator surface (docs/architecture.md#operator-surface). This file
// only dispatches subcommands; config.go loads configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
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
}

func commands() map[string]command {
	return map[string]command{
		"migrate":     {"apply the embedded schema migrations to the metastore", cmdMigrate},
		"run":         {"run one cycle (--once) and exit; --dry-run prints the plan", cmdRun},
		"serve":       {"run the daemon: lease, schedule, admin requests, HTTP", cmdServe},
		"version":     {"print the binary's schema version", cmdVersion},
		"inspect":     {"decode and print a slot or settled object (FILE, or --key KEY fetched from the store)", cmdInspect},
		"crashpoints": {"list the crash points NOVA_AUDITOR_CRASHPOINT=name[:n] can arm", cmdCrashpoints},
		"trigger":     {"ask the leader for a cycle now (--stream ID: settle that stream regardless of linger)", cmdTrigger},
		"pause":       {"pause the star: the leader keeps its lease and runs no cycle", cmdPause},
		"resume":      {"resume a paused or halted star", cmdResume},
		"release":     {"lift a stream's quarantine (--stream ID)", cmdRelease},
		"erase":       {"record an erasure of records of a stream (--stream ID --from R --count N); the next cycle applies it", cmdErase},
		"status":      {"leader, lag, due streams, trim, backlog, quarantine, last runs (--json); --fleet: members, stars per member, unowned stars, moves", cmdStatus},
		"verify":      {"fsck of the catalog: every entry's object exists, decodes, and tiles its stream; --strays: also the objects no metadata names", cmdVerify},
		"reconcile":   {"rebuild the star's metastore view from its object store after a restore (--apply; a dry run without)", cmdReconcile},
		"doctor":      {"check the metastore and every bucket before deploying: one line per check (--json)", cmdDoctor},
		"completion":  {"print a shell completion script (completion bash)", cmdCompletion},
	}
}

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
		summaries[n] = c.summary
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		return cmdVersion(ctx, e, args[1:])
	}
	name, code, ok := cli.Route("auditor", e.stdout, e.stderr, summaries, args)
	if !ok {
		if code == exitOK {
			fmt.Fprintln(e.stdout, "  --version    print the version (the version command)")
			writeExitCodes(e.stdout)
		}
		return code
	}
	return cmds[name].run(ctx, e, args[1:])
}

// exitCode maps an error to the process exit code and prints it: usage,
// configuration and schema-version problems are 2, the rest 1.
func exitCode(e env, cfg config.Config, err error) int {
	if err == nil || errors.Is(err, cli.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(e.stderr, "auditor: %s\n", cfg.Scrub(err.Error()))
	var rewound *cycle.RewoundError
	switch {
	case errors.As(err, &rewound):
		return exitRewound
	case errors.Is(err, config.ErrConfig),
		errors.Is(err, catalog.ErrUnreachable),
		errors.Is(err, catalog.ErrRefused),
		errors.Is(err, migrations.ErrDatabaseBehind),
		errors.Is(err, migrations.ErrDatabaseNewer):
		return exitUsage
	}
	return exitFailure
}

func cmdVersion(_ context.Context, e env, args []string) int {
	fmt.Fprintf(e.stdout, "auditor %s (schema version %d)\n", buildVersion(), migrations.Latest())
	return exitOK
}

func cmdCrashpoints(_ context.Context, e env, _ []string) int {
	for _, n := range crashPoints() {
		fmt.Fprintln(e.stdout, n)
	}
	return exitOK
}
