package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/fleet"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
)

// `auditor doctor`: the checks of doctor_checks.go over the configuration
// serve would run with, printed as a table (or --json), before any data is
// at stake. Exit 0 when every check is ok or warns, 3 when one fails, 5
// when the database did not answer or no bucket could be reached at all, 2
// for a configuration error.

// doctorReport is what doctor prints.
type doctorReport struct {
	// ProbePrefix is where the bucket checks wrote, in every bucket (the
	// store's key prefix included); they removed what they wrote.
	ProbePrefix string     `json:"probe_prefix"`
	Checks      []checkRow `json:"checks"`
	ExitCode    int        `json:"exit_code"`
	// waiting are the buckets that could not be reached in a way waiting
	// may cure (a timeout, a 5xx, a lost connection): serve starts anyway.
	waiting []string
}

// doctorBucketTimeout bounds one bucket's checks: a store that stalls
// fails its check rather than hanging the command.
const doctorBucketTimeout = 2 * time.Minute

func cmdDoctor(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	asJSON := fs.Bool("json", false, "print the checks as JSON")
	members := fs.Int("fleet-members", 0, "judge the connections of `N` fleet members at --fleet-max-conns (0: of this star's serve, at its pool)")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "star", "database-url")
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if _, err := wire.Buckets(cfg); err != nil {
			return exitCode(e, cfg, err)
		}
		pg := []checkRow{}
		db, err := openDB(ctx, cfg)
		dbErr, dbUnreachable := err, errors.Is(err, catalog.ErrUnreachable)
		switch {
		case dbUnreachable:
			pg = append(pg, checkRow{Status: statusFail, Scope: "postgres", Check: "reachable",
				Seen: cfg.Scrub(err.Error()), Do: "check the database is up and the network path to the URL's host and port"})
		case err != nil:
			pg = append(pg, checkRow{Status: statusFail, Scope: "postgres", Check: "reachable",
				Seen: cfg.Scrub(err.Error()), Do: "check --database-url: the role, its password, the database name, the TLS settings"})
		default:
			pg = append(pg, postgresChecks(ctx, cfg, db.Ledger())...)
			pg = append(pg, doctorConnections(ctx, cfg, db, *members))
			db.Close()
		}
		rep, err := runDoctor(ctx, cfg, pg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if dbUnreachable {
			rep.ExitCode = exitUnreachable // a dependency not reached outranks the checks that failed for it
			fmt.Fprintf(e.stderr, "auditor: %s\n", cfg.Scrub(dbErr.Error()))
		}
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return exitCode(e, cfg, fmt.Errorf("write the report: %w", err))
			}
			return rep.ExitCode
		}
		writeDoctorTable(e.stdout, rep)
		return rep.ExitCode
	}
}

// postgresChecks are the rows of a metastore that answered: reachable, then
// checkPostgres's.
func postgresChecks(ctx context.Context, cfg config.Config, db doctorMetastore) []checkRow {
	rows := []checkRow{{Status: statusOK, Scope: "postgres", Check: "reachable", Seen: config.RedactURL(cfg.DatabaseURL)}}
	for _, r := range checkPostgres(ctx, db, cfg.Star, cfg.SettleConcurrency) {
		r.Seen = cfg.Scrub(r.Seen)
		rows = append(rows, r)
	}
	return rows
}

// doctorConnections is doctor's connections row: members fleet members at
// their bound, or with none this star's serve at its pool.
func doctorConnections(ctx context.Context, cfg config.Config, db *catalog.DB, members int) checkRow {
	sc, err := db.ServerConns(ctx, catalog.FleetAppName)
	if err != nil {
		return checkRow{Status: statusWarn, Scope: "postgres", Check: "connections", Seen: cfg.Scrub(err.Error()),
			Do: "check the role can read pg_stat_activity"}
	}
	if members <= 0 {
		return connectionsRow(sc, 1, int(db.PoolStats().Max), "pool_max_conns in --database-url")
	}
	bound := int(cfg.FleetMaxConns)
	if bound == 0 {
		bound = fleet.DefaultMaxConns(int(cfg.FleetCycles))
	}
	return connectionsRow(sc, members, bound, "--fleet-max-conns")
}

// runDoctor checks every bucket of cfg's topology after the metastore's
// rows pg, and judges the whole (serve runs it at start too). An error is
// a store that cannot even be built from the configuration.
func runDoctor(ctx context.Context, cfg config.Config, pg []checkRow) (doctorReport, error) {
	buckets, err := wire.Buckets(cfg)
	if err != nil {
		return doctorReport{}, err
	}
	store, err := openStore(ctx, cfg)
	if err != nil {
		return doctorReport{}, err
	}
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce) // crypto/rand.Read does not fail
	d := &bucketDoctor{store: store, verify: cfg.Verify, prefix: "doctor/" + hex.EncodeToString(nonce) + "/"}
	_, d.keyPrefixes = checkedBuckets(cfg)
	if rr, ok := store.(bucketRulesReader); ok {
		d.rules = rr
	}
	if s3, ok := store.(*s3store.Store); ok {
		d.probeChecksum = s3.ProbeChecksum
		d.withProbe = func(p objstore.ChecksumProbe) (objstore.Store, error) { return s3.WithProbe(p) }
		d.clock = s3.ClockSkew
	}
	sched, err := config.ParseSchedule(cfg.Schedule)
	if err != nil {
		return doctorReport{}, fmt.Errorf("schedule: %w", err) // config.Load validated it
	}
	rep := doctorReport{ProbePrefix: cfg.KeyPrefix + d.prefix,
		Checks: append(slices.Clip(pg), scheduleRow(sched, duePolicy(cfg), time.Now()))}
	unreachable := 0
	for _, b := range buckets {
		bctx, cancel := context.WithTimeout(ctx, doctorBucketTimeout)
		br := d.check(bctx, b)
		cancel()
		rep.Checks = append(rep.Checks, br.rows...)
		if br.unreachable {
			unreachable++
		}
		if br.retryable {
			rep.waiting = append(rep.waiting, b)
		}
	}
	rep.ExitCode = doctorExitCode(rep.Checks, unreachable == len(buckets))
	return rep, nil
}

// doctorExitCode is 5 when the store could not be reached at all, 3 when a
// check failed, else 0 (warnings included).
func doctorExitCode(rows []checkRow, storeUnreachable bool) int {
	if storeUnreachable {
		return exitUnreachable
	}
	for _, r := range rows {
		if r.Status == statusFail {
			return exitFindings
		}
	}
	return exitOK
}

// oneLine folds s's runs of white space, newlines included, to one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// writeDoctorTable prints one line per check, then what was written where
// and the tally.
func writeDoctorTable(w io.Writer, rep doctorReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tSCOPE\tCHECK\tSEEN\tDO")
	n := map[string]int{}
	for _, r := range rep.Checks {
		n[r.Status]++
		do := r.Do
		if do == "" {
			do = "-"
		}
		// one line per check: a driver's multi-line error is folded
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Status, r.Scope, r.Check, oneLine(r.Seen), oneLine(do))
	}
	tw.Flush() //nolint:errcheck // the table is the report's human text, as the unchecked Fprintf lines around it (.golangci.yml)
	fmt.Fprintf(w, "probe objects were written only under %s in each bucket and removed (the S3 checksum probe uses .nova-probe/ and removes its own)\n", rep.ProbePrefix)
	fmt.Fprintf(w, "%d ok, %d warn, %d fail: exit %d\n", n[statusOK], n[statusWarn], n[statusFail], rep.ExitCode)
}
