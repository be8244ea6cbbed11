package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/logging"
	"github.com/nova/auditor/trim"
	"github.com/nova/auditor/verify"
)

// The operator commands that talk to a running daemon through the
// metastore (docs/operations.md#operator-surface): each records an admin request and
// notifies the star's daemons; pause, resume and release also change the
// persisted state themselves, so they hold with no daemon running.

// requester names who asked, for the admin_requests row.
func requester(e env) string {
	user := e.getenv("USER")
	if user == "" {
		user = "unknown"
	}
	host, _ := os.Hostname()
	return user + "@" + host
}

// adminCtx is what an admin command's body works with once withAdmin
// set it up: the configuration, the open metastore, and the --stream
// given (nil when the command has none, or it was not given).
type adminCtx struct {
	ctx    context.Context
	e      env
	cfg    config.Config
	db     *catalog.DB
	stream *catalog.StreamID
}

// withAdmin is the run of an admin command: once cobra parsed the flags,
// it loads the configuration (--star and --database-url required), reads
// --stream when the command has one, opens the metastore, checks the star
// and the stream exist, and runs body; a failure on the way exits with
// its code (exitCode) and body is not run. The metastore is closed after
// body, whose exit code is the command's.
func withAdmin(e env, fs *cli.Flags, body func(a *adminCtx) int) runFunc {
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "star", "database-url")
		if err != nil {
			return exitCode(e, cfg, err)
		}
		db, stream, code := adminOpen(ctx, e, fs, cfg)
		if code >= 0 {
			return code
		}
		defer db.Close()
		return body(&adminCtx{ctx: ctx, e: e, cfg: cfg, db: db, stream: stream})
	}
}

// fail prints err (scrubbed) on stderr and is its exit code (exitCode).
func (a *adminCtx) fail(err error) int { return exitCode(a.e, a.cfg, err) }

// refuse is bad input in the flag field: msg as a configuration error,
// exit 2.
func (a *adminCtx) refuse(field, msg string) int {
	return a.fail(&config.Error{Field: field, Msg: msg})
}

// request records an admin request of kind (for stream, or nil) for the
// star, in the name of requester(e).
func (a *adminCtx) request(kind string, stream *catalog.StreamID) (catalog.AdminRequest, error) {
	return a.db.Requests().RequestAdmin(a.ctx, a.cfg.Star, kind, stream, requester(a.e))
}

// warnNoLeader is warnNoLeader for the command's star.
func (a *adminCtx) warnNoLeader() { warnNoLeader(a.ctx, a.e, a.db.Leases(), a.cfg.Star) }

// adminOpen is withAdmin's set-up once the flags are loaded (and
// status's, whose flags require no star with --fleet): it reads --stream
// when the command has one, opens the metastore and checks the star and
// the stream exist.
func adminOpen(ctx context.Context, e env, fs *cli.Flags, cfg config.Config) (db *catalog.DB, stream *catalog.StreamID, code int) {
	if f := fs.Lookup("stream"); f != nil && f.Value.String() != "" {
		id, err := bundlefmt.ParseStreamID(f.Value.String())
		if err != nil {
			return nil, nil, exitCode(e, cfg, &config.Error{Field: "stream", Msg: err.Error()})
		}
		stream = &id
	}
	db, err := openCurrentDB(ctx, cfg)
	if err != nil {
		return nil, nil, exitCode(e, cfg, err)
	}
	// A typo must not read as a healthy, idle star, nor record a request
	// no daemon will ever take.
	if err := checkStar(ctx, db.Streams(), cfg.Star, stream); err != nil {
		db.Close()
		return nil, nil, exitCode(e, cfg, err)
	}
	return db, stream, -1
}

// starLookup is what checkStar reads of the metastore.
type starLookup interface {
	StarExists(ctx context.Context, star string) (bool, error)
	StreamOfStar(ctx context.Context, star string, id catalog.StreamID) (bool, error)
	Stream(ctx context.Context, id catalog.StreamID) (catalog.Stream, error)
}

// checkStar is a configuration error when the star, or the stream in it,
// is not in the metastore.
func checkStar(ctx context.Context, db starLookup, star string, stream *catalog.StreamID) error {
	ok, err := db.StarExists(ctx, star)
	if err != nil {
		return err
	}
	if !ok {
		return &config.Error{Field: "star", Msg: fmt.Sprintf("no star %q in the metastore (nova.stars)", star)}
	}
	if stream == nil {
		return nil
	}
	if ok, err = db.StreamOfStar(ctx, star, *stream); err != nil {
		return err
	}
	if ok {
		return nil
	}
	other, err := db.Stream(ctx, *stream)
	switch {
	case err == nil:
		return &config.Error{Field: "stream", Msg: fmt.Sprintf("stream %s is in star %q, not %q", stream.String(), other.Star, star)}
	case errors.Is(err, catalog.ErrNotFound):
		return &config.Error{Field: "stream", Msg: fmt.Sprintf("no stream %s in star %q", stream.String(), star)}
	}
	return err
}

// leaseLookup is what warnNoLeader reads of the metastore.
type leaseLookup interface {
	CurrentLease(ctx context.Context, star string) (catalog.Lease, bool, error)
}

// warnNoLeader tells the operator when no daemon will pick the request up.
func warnNoLeader(ctx context.Context, e env, db leaseLookup, star string) {
	l, live, err := db.CurrentLease(ctx, star)
	if err == nil && live {
		fmt.Fprintf(e.stdout, "leader: %s (token %d)\n", l.Holder, l.Token)
		return
	}
	fmt.Fprintf(e.stderr, "auditor: warning: no auditor holds the lease of star %q; the request waits for one\n", star)
}

// cmdTrigger is `auditor trigger`: it records a trigger request; with
// --wait it waits until a cycle has finished it and exits with its
// outcome (waitTrigger).
func cmdTrigger(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	fs.String("stream", "", "settle the stream `ID` (uuid or 32 hex digits) now, regardless of linger")
	wait := fs.Bool("wait", false, "wait until a cycle has finished the request and exit with its outcome: 0 done, 1 failed (or its cycle failed or halted, or the star is halted), 7 past --timeout (--wait 30s: --wait --timeout 30s)")
	timeout := fs.Duration("timeout", 0, "with --wait: wait at most this long (0: no bound)")
	return withAdmin(e, fs, func(a *adminCtx) int {
		if *timeout < 0 {
			return a.refuse("timeout", fmt.Sprintf("%s: must be at least 0", *timeout))
		}
		req, err := a.request(catalog.AdminTrigger, a.stream)
		if err != nil {
			return a.fail(err)
		}
		what := "a cycle"
		if a.stream != nil {
			what = "a cycle settling stream " + a.stream.String() + " regardless of linger"
		}
		fmt.Fprintf(e.stdout, "trigger request %d recorded for star %s: %s\n", req.ID, a.cfg.Star, what)
		a.warnNoLeader()
		if !*wait {
			return exitOK
		}
		code, err := waitTrigger(a.ctx, e, a.db.Requests(), a.cfg.Star, req.ID, *timeout)
		if err != nil {
			return a.fail(fmt.Errorf("wait for trigger request %d: %w", req.ID, err))
		}
		return code
	})
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func cmdPause(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	return withAdmin(e, fs, func(a *adminCtx) int {
		req, err := a.request(catalog.AdminPause, nil)
		if err != nil {
			return a.fail(err)
		}
		fmt.Fprintf(e.stdout, "star %s paused (request %d): the leader keeps its lease and runs no cycle until auditor resume\n", a.cfg.Star, req.ID)
		a.warnNoLeader()
		return exitOK
	})
}

func cmdResume(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	return withAdmin(e, fs, func(a *adminCtx) int {
		before, err := a.db.Ledger().DaemonState(a.ctx, a.cfg.Star)
		if err != nil {
			return a.fail(err)
		}
		req, err := a.request(catalog.AdminResume, nil)
		if err != nil {
			return a.fail(err)
		}
		fmt.Fprintf(e.stdout, "star %s resumed (request %d)\n", a.cfg.Star, req.ID)
		if before.Halted() {
			fmt.Fprintf(e.stdout, "cleared the halt: %s\n", before.HaltedReason)
		}
		a.warnNoLeader()
		return exitOK
	})
}

func cmdRelease(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	fs.String("stream", "", "release the quarantined stream `ID` (uuid or 32 hex digits)")
	return withAdmin(e, fs, func(a *adminCtx) int {
		if a.stream == nil {
			return a.refuse("stream", "is required: the stream to release (auditor status lists the quarantine)")
		}
		req, err := a.request(catalog.AdminRelease, a.stream)
		if errors.Is(err, catalog.ErrNotFound) {
			fmt.Fprintf(e.stderr, "auditor: stream %s of star %s is not quarantined\n", a.stream.String(), a.cfg.Star)
			return exitFailure
		}
		if err != nil {
			return a.fail(err)
		}
		fmt.Fprintf(e.stdout, "stream %s released from quarantine (request %d): the next cycle settles it again\n",
			a.stream.String(), req.ID)
		return exitOK
	})
}

// fleetJSONHelp documents the fields of `auditor status --fleet --json`
// (daemon.FleetStatus) in the command's help.
const fleetJSONHelp = `the fleet of auditor serve --stars instead of one star (no --star needed): members, the stars each leads, unowned stars, cap and imbalance, the moves of the last hour. With --json the fields are:
now; summary {members, live_members (alive, not draining: N), draining_members, expired_members, stars, selected_stars (selected by a live member: M), led_stars, unowned_stars, cap (ceil(M/N)), floor (floor(M/N)), imbalance (most minus fewest led over the live members), longest_unowned_seconds};
members [{member, instance, alive, draining, stars_selector, led, stars_led, balance (ok, below_floor, above_cap; live members only), started_at, heartbeat_at, heartbeat_age_seconds, expires_at}];
stars, unowned (longest first), led_outside_fleet [{star, holder, token, live, expires_at, unowned_seconds, selected, released_why, released_seconds_ago, handoff_to, last_move_seconds_ago}];
moves {window_seconds, total, by_reason {new, released, drain, balance, stuck, lost}, limit, recent (newest first) [{at, star, from, to, reason, over_cap, unowned_seconds, token}]}.
Exit 0 whenever it read the fleet, as auditor status without --check: the alerts judge`

func cmdStatus(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	asJSON := fs.Bool("json", false, "print JSON (the same document as GET /status)")
	fleet := fs.Bool("fleet", false, fleetJSONHelp)
	check := fs.Bool("check", false, "after the status, exit non-zero when the star needs an operator: halted, no live leader, paused, quarantine past --max-quarantined (the codes below; each condition on stderr)")
	maxQuarantined := fs.Int("max-quarantined", 0, "with --check: tolerate `N` quarantined streams and slots (0: any fails the check)")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args)
		switch {
		case err != nil:
		case *fleet && *check:
			err = &config.Error{Field: "check", Msg: "judges one star (--star): use it without --fleet"}
		case *maxQuarantined < 0:
			err = &config.Error{Field: "max-quarantined", Msg: fmt.Sprintf("%d: must be at least 0", *maxQuarantined)}
		case *fleet:
			err = cfg.Require("database-url")
		default:
			err = cfg.Require("star", "database-url")
		}
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if *fleet {
			return statusFleet(ctx, e, cfg, *asJSON)
		}
		db, _, code := adminOpen(ctx, e, fs, cfg)
		if code >= 0 {
			return code
		}
		defer db.Close()
		dc := daemonConfig(cfg)
		s, err := daemon.BuildStatus(ctx, db.Ledger(), daemon.StatusOptions{Star: cfg.Star, Policy: dc.Policy, ReapGrace: cfg.ReapGrace,
			ErasureAlertAfter: cfg.ErasureAlertAfter, Trim: trimReader(db.Trim()), CycleInterval: daemon.CycleInterval(dc.Schedule, time.Now())})
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if *asJSON {
			err = s.WriteJSON(e.stdout)
		} else {
			err = s.WriteText(e.stdout)
		}
		if err != nil || !*check {
			return exitCode(e, cfg, err)
		}
		code, why := statusCheck(s, *maxQuarantined)
		for _, w := range why {
			fmt.Fprintf(e.stderr, "auditor: check: %s\n", w)
		}
		return code
	}
}

// statusFleet is `auditor status --fleet`: the fleet of every star, read
// from the metastore alone (daemon.BuildFleetStatus).
func statusFleet(ctx context.Context, e env, cfg config.Config, asJSON bool) int {
	db, err := openCurrentDB(ctx, cfg)
	if err != nil {
		return exitCode(e, cfg, err)
	}
	defer db.Close()
	s, err := daemon.BuildFleetStatus(ctx, db.Fleet(), daemon.FleetStatusOptions{})
	if err != nil {
		return exitCode(e, cfg, err)
	}
	if asJSON {
		err = s.WriteJSON(e.stdout)
	} else {
		err = s.WriteText(e.stdout)
	}
	return exitCode(e, cfg, err)
}

// cmdVerify is `auditor verify`: the fsck of the star's catalog. Exit 0 when
// sound, 3 on any finding, 5 when the store could not be read (nothing was
// judged), 1 when it could not look otherwise.
func cmdVerify(e env, c *cobra.Command) runFunc {
	var rate, window int64
	// The sizes are parsed with the flags, so a bad one is refused before
	// the metastore is opened.
	fs := newFlags(e, c)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	concurrency := fs.Int("concurrency", 4, "read `N` objects at once")
	strays := fs.Bool("strays", false, "also list the star's streams' settled prefixes and its chain for objects no metadata names (strays): each is a finding")
	fs.String("stream", "", "verify the stream `ID` only (uuid or 32 hex digits)")
	sample := fs.Float64("sample", 1, "verify this `FRACTION` of the objects, chosen at random (tiling is checked for every stream)")
	fs.SizeVar(&rate, "rate", 0, "read at most this many bytes per second (like 64MiB; 0: unpaced)")
	fs.SizeVar(&window, "window", 4<<20, "most chunk bytes held per object read (like 4MiB): memory is at most --concurrency x (footer + max(window, the longest record))")
	return withAdmin(e, fs, func(a *adminCtx) int {
		opts := verify.Options{Star: a.cfg.Star, Stream: a.stream, Concurrency: *concurrency, Sample: *sample, Rate: rate, Window: window}
		switch {
		case *sample <= 0 || *sample > 1:
			return a.refuse("sample", fmt.Sprintf("%v is not a fraction in (0, 1]", *sample))
		case *concurrency < 1:
			return a.refuse("concurrency", fmt.Sprintf("%d objects at once: at least 1", *concurrency))
		case opts.Window < 1:
			return a.refuse("window", "must be at least 1 byte")
		case *strays && a.stream != nil:
			return a.refuse("strays", "lists the whole star: use it without --stream")
		}
		// The same store and topology the cycle uses.
		store, err := openStore(a.ctx, a.cfg)
		if err != nil {
			return a.fail(err)
		}
		top, err := wire.Topology(a.cfg, store, nil)
		if err != nil {
			return a.fail(err)
		}
		tty := logging.IsTerminal(e.stderr)
		if tty {
			opts.Progress = func(objects, stream, streams int) {
				fmt.Fprintf(e.stderr, "\r%s", progressBar(objects, stream, streams, 40))
			}
		}
		rd := bundle.NewReader(top)
		rep, err := verify.Verify(a.ctx, a.db.Streams(), rd, opts)
		if tty {
			fmt.Fprintln(e.stderr)
		}
		var sr *strayReport
		if err == nil && *strays {
			sr, err = findStrays(a.ctx, a.db, rd, a.cfg)
		}
		if errors.Is(err, verify.ErrStoreAccess) || errors.Is(err, trim.ErrListing) {
			fmt.Fprintf(e.stderr, "auditor: verify: %s\nauditor: nothing was judged: check the S3 credentials, permissions and endpoint\n", a.cfg.Scrub(err.Error()))
			return exitUnreachable
		}
		if err != nil {
			return a.fail(fmt.Errorf("verify: %w", err))
		}
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(verifyOutput{Report: rep, Strays: sr}); err != nil {
				return a.fail(err)
			}
		} else {
			for _, f := range rep.Findings {
				fmt.Fprintln(e.stdout, f)
			}
			sr.print(e.stdout)
			sampled := ""
			if rep.Objects != rep.Cataloged {
				sampled = fmt.Sprintf(" (a sample of the %d cataloged)", rep.Cataloged)
			}
			fmt.Fprintf(e.stdout, "verified %d objects%s (%d bytes read) of %d streams of star %s: %d findings\n",
				rep.Objects, sampled, rep.Bytes, rep.Streams, a.cfg.Star, len(rep.Findings)+sr.count())
		}
		if len(rep.Findings) > 0 || sr.count() > 0 {
			return exitFindings
		}
		return exitOK
	})
}

// progressBar draws verify's progress over the streams, and the objects
// verified so far: verify [=====>    ] stream 12/40, 345 objects.
func progressBar(objects, stream, streams, width int) string {
	filled := width
	if streams > 0 {
		filled = stream * width / streams
	}
	bar := strings.Repeat("=", filled)
	if filled < width {
		bar += ">" + strings.Repeat(" ", width-filled-1)
	}
	return fmt.Sprintf("verify [%s] stream %d/%d, %d objects", bar, stream, streams, objects)
}
