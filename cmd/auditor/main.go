// Command auditor is Nova's singleton-per-star background settler: it settles
// due streams into create-once settled objects, trims and reaps transit
// slots, and serves its operator surface (docs/operations.md#operator-surface). This file
// builds the command tree (on cobra, with internal/cli's help layout) and
// dispatches; config.go loads configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

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

// runFunc runs a command, its flags parsed, with its positional
// arguments, and returns its exit code.
type runFunc func(ctx context.Context, args []string) int

type command struct {
	// summary is the one-line synopsis (cobra's Short), description what
	// the command does (Long), example one command line (Example).
	summary, description, example string
	// build defines the command's flags on c and returns what runs it.
	build func(e env, c *cobra.Command) runFunc
	// exits are the codes of the exit-code table the command may return,
	// which its -h lists (TestEveryCommandRefusesBadInput holds the
	// command to them).
	exits []int
	// use is the usage line after the command's name ("[flags]" when "").
	use string
	// args takes positional arguments (inspect's FILE, completion's
	// shell); without it one is a usage error.
	args bool
	// footer is help printed after the exit codes (a code table of its own).
	footer string
	// waitShorthand: --wait DURATION is --wait --timeout DURATION (waitArgs).
	waitShorthand bool
	// testing marks the commands of the fault-injection hooks, for
	// tests: they run as any other, but the top-level help and the
	// completion do not list them.
	testing bool
}

func commands() map[string]command {
	// The codes of a command that reads the metastore and nothing else
	// that can fail apart.
	db := []int{exitOK, exitFailure, exitUsage, exitUnreachable}
	return map[string]command{
		"migrate": {summary: "apply the embedded schema migrations to the metastore",
			description: "Apply the schema migrations embedded in this binary to the metastore, in order, each once. --status prints the database's version against the binary's and changes nothing; --dry-run lists what would be applied.",
			build:       cmdMigrate, exits: db, footer: migrateStatusHelp(),
			example: "auditor migrate --database-url postgres://nova_migrator@db:5432/nova --status"},
		"run": {summary: "run one cycle (--once) and exit; --dry-run prints the plan, made with the leader's recorded policy (--json)",
			description: "Run one cycle of the star (settle, trim, reap) under its lease and exit with its outcome. --dry-run changes nothing and prints the plan the cycle would carry out, made with the policy the star's leader recorded (a policy flag given here overrides it).",
			build:       cmdRun, exits: append(slices.Clip(db), exitRewound),
			example: "auditor run --once --star s1 --database-url postgres://nova_auditor@db:5432/nova --dry-run --json"},
		"serve": {summary: "run the daemon: lease, schedule, admin requests, HTTP",
			description: "Run the daemon: hold the star's lease (or, with --stars, take a fleet member's share of the stars), run cycles on the schedule and on admin requests, and serve /metrics, /status, /healthz and /readyz. It runs until SIGTERM or SIGINT.",
			build:       cmdServe, exits: []int{exitOK, exitFailure, exitUsage, exitFindings},
			example: "auditor serve --star s1 --config /etc/nova/auditor.yaml"},
		"version": {summary: "print the auditor's version, revision and the schema version it migrates to",
			description: "Print the auditor's version, the source revision it was built from (unknown when neither make build stamped it nor Go recorded it), the Go version and the schema version its migrations reach (the same as auditor --version).",
			build:       cmdVersion, exits: []int{exitOK, exitUsage},
			example: "auditor version"},
		"inspect": {summary: "decode and print a slot or settled object (FILE, or --key KEY fetched from the store)",
			description: inspectDescription, use: "[flags] FILE | --key KEY [--json] [--records] [storage flags]", args: true,
			build: cmdInspect, exits: []int{exitOK, exitFailure, exitUsage, exitFindings, exitUnsupported},
			example: "auditor inspect --star s1 --key buckets/nova/streams/0f3c2b1a000040008000000000000001/00000000000000000001/00000000000000000000~0 --records"},
		"crashpoints": {summary: "list the fault-injection points (for tests) NOVA_AUDITOR_CRASHPOINT, NOVA_AUDITOR_PAUSEPOINT and NOVA_AUDITOR_STALLPOINT=name[:n] can arm; not in the top-level help",
			description: "List the fault-injection points, for tests: NOVA_AUDITOR_CRASHPOINT, NOVA_AUDITOR_PAUSEPOINT and NOVA_AUDITOR_STALLPOINT=name[:n] arm one. A command started with one armed logs a warning and sets nova_auditor_fault_points_armed.",
			build:       cmdCrashpoints, exits: []int{exitOK, exitUsage}, testing: true,
			example: "NOVA_AUDITOR_CRASHPOINT=settle.after-complete:2 auditor run --once --star s1"},
		"trigger": {summary: "ask the leader for a cycle now (--stream ID: settle that stream regardless of linger); --wait: until the cycle finished, exit with its outcome",
			description: "Record a trigger request for the star's leader, which runs a cycle as soon as it takes it. With --wait, wait until a cycle has finished the request and exit with its outcome.",
			build:       cmdTrigger, exits: append(slices.Clip(db), exitTimeout), waitShorthand: true,
			example: "auditor trigger --star s1 --stream 0f3c2b1a-0000-4000-8000-000000000001 --wait --timeout 10m"},
		"pause": {summary: "pause the star: the leader keeps its lease and runs no cycle",
			description: "Pause the star: its leader keeps the lease and runs no cycle until auditor resume. The pause is persisted, so it holds with no daemon running.",
			build:       cmdPause, exits: db,
			example: "auditor pause --star s1"},
		"resume": {summary: "resume a paused or halted star",
			description: "Resume a paused star, or clear a halted star's halt, so its leader runs cycles again.",
			build:       cmdResume, exits: db,
			example: "auditor resume --star s1"},
		"release": {summary: "lift a stream's quarantine (--stream ID)",
			description: "Lift the quarantine of one stream of the star, so the next cycle settles it again (auditor status lists the quarantine).",
			build:       cmdRelease, exits: db,
			example: "auditor release --star s1 --stream 0f3c2b1a-0000-4000-8000-000000000001"},
		"erase": {summary: "record an erasure of records of a stream (--stream ID --from R --count N); the next cycle applies it; --dry-run: what it would rewrite; --wait: until applied",
			description: "Record an erasure of --count records of --stream from --from; the next cycle's erasure step applies it. --dry-run records nothing and prints what the erasure would rewrite; --wait waits until it is applied.",
			build:       cmdErase, exits: append(slices.Clip(db), exitTimeout), waitShorthand: true,
			example: "auditor erase --star s1 --stream 0f3c2b1a-0000-4000-8000-000000000001 --from 100 --count 5 --dry-run"},
		"status": {summary: "leader, lag, due streams, trim, backlog, quarantine, last runs (--json); --fleet: members, stars per member, unowned stars, moves; --check: exit non-zero when the star needs an operator",
			description: "Print the star's status as the metastore holds it: leader, lag, due streams, trim, backlog, quarantine and last runs; --fleet prints the fleet instead. --check turns the status into an exit code for automation.",
			build:       cmdStatus, exits: db, footer: statusCheckHelp(),
			example: "auditor status --star s1 --check --max-quarantined 0"},
		"ls": {summary: "list the catalog entries of the star's streams (--stream ID: one): key, records, revision, size, class, bucket (--json); reads only",
			description: "List the catalog entries of the star's streams, stream by stream, as the metastore holds them: key, records, revision, size, class and bucket. It only reads, so a read-only role may run it.",
			build:       cmdLs, exits: db,
			example: "auditor ls --star s1 --stream 0f3c2b1a-0000-4000-8000-000000000001 --json"},
		"verify": {summary: "fsck of the catalog: every entry's object exists, decodes, and tiles its stream; --strays: also the objects no metadata names",
			description: "Check the star's catalog against its object store: every entry's object exists and decodes, every DataCRC matches, and the entries tile each stream. --strays also lists the objects no metadata names.",
			build:       cmdVerify, exits: append(slices.Clip(db), exitFindings),
			example: "auditor verify --star s1 --sample 0.01 --rate 50MiB"},
		"reconcile": {summary: "rebuild the star's metastore view from its object store after a restore (--apply; a dry run without)",
			description: "Rebuild the star's metastore view from its object store after the metastore was restored from a backup or failed over with lost commits. Without --apply it is a dry run that prints what it would change.",
			build:       cmdReconcile, exits: append(slices.Clip(db), exitFindings),
			example: "auditor reconcile --star s1 --apply"},
		"doctor": {summary: "check the metastore and every bucket before deploying: one line per check (--json)",
			description: "Check the metastore (reachable, schema current, roles and grants) and every configured bucket before deploying, one line per check with what to change when it fails.",
			build:       cmdDoctor, exits: append(slices.Clip(db), exitFindings),
			example: "auditor doctor --star s1 --json"},
		"completion": {summary: "print a shell completion script (completion bash|zsh|fish)",
			description: completionDescription, use: "bash|zsh|fish", args: true,
			build: cmdCompletion, exits: []int{exitOK, exitUsage},
			example: "source <(auditor completion bash)"},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// dispatch runs the command args name and returns the exit code.
func dispatch(ctx context.Context, e env, args []string) int {
	if len(args) > 0 && commands()[args[0]].waitShorthand {
		args = append([]string{args[0]}, waitArgs(args[1:])...)
	}
	return cli.Execute(newRoot(ctx, e), args, e.stderr, config.Config{}.Scrub)
}

// newRoot builds the command tree: the root, `auditor --version`, and a
// cobra command of each of commands().
func newRoot(ctx context.Context, e env) *cobra.Command {
	root := cli.NewRoot("auditor", "Nova's singleton-per-star background settler",
		"The auditor settles due streams into create-once settled objects, trims and reaps transit slots, and serves its operator surface (docs/operations.md).")
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.Version = versionLine()
	root.SetVersionTemplate("auditor {{.Version}}\n")
	var codes strings.Builder
	writeExitCodes(&codes)
	root.Annotations = map[string]string{cli.FooterAnnotation: codes.String()}
	for name, c := range commands() {
		use := c.use
		if use == "" {
			use = "[flags]"
		}
		footer := commandExitsHelp(name)
		if c.footer != "" {
			footer += "\n" + c.footer
		}
		cmd := &cobra.Command{
			Use:         name + " " + use,
			Short:       c.summary,
			Long:        c.description,
			Example:     "  " + c.example,
			Hidden:      c.testing,
			Annotations: map[string]string{cli.FooterAnnotation: footer},
		}
		if !c.args {
			cmd.Args = cli.NoArgs
			cmd.ValidArgsFunction = cobra.NoFileCompletions
		}
		run := c.build(e, cmd)
		cmd.RunE = func(_ *cobra.Command, args []string) error { return cli.Exit(run(ctx, args)) }
		root.AddCommand(cmd)
	}
	return root
}

// exitCode maps an error to the process exit code and prints it: usage,
// configuration and schema-version problems (a database refusing the URL
// among them) are 2, a database that does not answer 5, the rest 1.
func exitCode(e env, cfg config.Config, err error) int {
	if err == nil {
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

func cmdVersion(e env, _ *cobra.Command) runFunc {
	return func(context.Context, []string) int {
		fmt.Fprintf(e.stdout, "auditor %s\n", versionLine())
		return exitOK
	}
}

func cmdCrashpoints(e env, _ *cobra.Command) runFunc {
	return func(context.Context, []string) int {
		for _, n := range crashPoints() {
			fmt.Fprintln(e.stdout, n)
		}
		return exitOK
	}
}
