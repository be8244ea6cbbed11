package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/logging"
	"github.com/nova/auditor/migrations"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
)

// slotChecksum parses --slot-checksum: crc32c, crc32, sha256 or none.
func slotChecksum(v string) (objstore.ChecksumAlgorithm, error) {
	a := objstore.ChecksumAlgorithm(strings.ToUpper(v))
	if !slices.Contains(objstore.PutAlgorithms, a) {
		return "", &config.Error{Field: "slot-checksum", Msg: fmt.Sprintf("%q must be crc32c, crc32, sha256 or none", v)}
	}
	return a, nil
}

// sharedKeys are the auditor's configuration keys novasim takes, with the
// auditor's meaning, flags, environment variables and file keys.
var sharedKeys = []string{"database-url", "fs-root", "bucket", "key-prefix", "s3-endpoint", "s3-region",
	"s3-path-style", "s3-express-buckets", "location", "star", "log-format", "log-level"}

func notify() <-chan os.Signal {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	return ch
}

// newFlags returns a subcommand's FlagSet with the shared keys bound.
func newFlags(e env, name string) (*flag.FlagSet, *config.Loader) {
	fs := cli.FlagSet("novasim " + name)
	return fs, config.Bind(fs, e.getenv, sharedKeys...)
}

// parse is cli.Parse with the command's stdout (for -h).
func parse(e env, fs *flag.FlagSet, l *config.Loader, args []string, require ...string) (config.Config, error) {
	return cli.Parse(e.stdout, fs, l, args, require...)
}

// exitCode reports err (without secrets) and maps it to an exit code.
func exitCode(e env, cfg config.Config, err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, cli.ErrHelp):
		return exitOK
	case errors.Is(err, config.ErrConfig), errors.Is(err, sim.ErrUsage), errors.Is(err, catalog.ErrUnreachable),
		errors.Is(err, migrations.ErrDatabaseBehind), errors.Is(err, migrations.ErrDatabaseNewer):
		fmt.Fprintf(e.stderr, "novasim: %s\n", cfg.Scrub(err.Error()))
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "novasim: %s\n", cfg.Scrub(err.Error()))
	return exitFailure
}

func newLogger(e env, cfg config.Config) (*slog.Logger, error) {
	l, err := logging.New(e.stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return nil, &config.Error{Field: "log-format", Msg: err.Error()}
	}
	if cfg.Star != "" {
		l = l.With("star", cfg.Star)
	}
	return l, nil
}

// open connects to the metastore (an unreachable database is a
// configuration error naming the field) and builds the storage.
func open(ctx context.Context, cfg config.Config, migrate bool) (*catalog.DB, sim.Storage, error) {
	return openWith(ctx, cfg, migrate, "")
}

// openWith is open with slots stored under the checksum algorithm put on
// S3 ("" the default).
func openWith(ctx context.Context, cfg config.Config, migrate bool, put objstore.ChecksumAlgorithm) (*catalog.DB, sim.Storage, error) {
	db, err := catalog.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, sim.Storage{}, &config.Error{Field: "database-url", Msg: fmt.Sprintf("%s: %v", config.RedactURL(cfg.DatabaseURL), err)}
	}
	if migrate {
		if _, err := db.Migrate(ctx); err != nil {
			db.Close()
			return nil, sim.Storage{}, fmt.Errorf("migrate: %w", err)
		}
	} else if err := db.CheckSchema(ctx); err != nil {
		db.Close()
		return nil, sim.Storage{}, fmt.Errorf("%w (novasim setup --migrate applies the migrations)", err)
	}
	store, err := wire.StoreWithPutChecksum(ctx, cfg, put)
	if err != nil {
		db.Close()
		return nil, sim.Storage{}, err
	}
	if err := wire.CreateLocalBuckets(cfg, store); err != nil {
		db.Close()
		return nil, sim.Storage{}, err
	}
	// The auditor's topology names the buckets novasim writes (a
	// configuration that is not one is refused here as there).
	top, err := wire.Topology(cfg, store, nil)
	if err != nil {
		db.Close()
		return nil, sim.Storage{}, err
	}
	express, _ := top.Buckets(catalog.ClassExpress) // none configured: no express set
	return db, sim.Storage{Store: store, Standard: top.Standard(), Express: express}, nil
}

// sizeFlag is an int64 flag that takes binary suffixes (KiB, MiB, GiB).
type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return "0"
	}
	return strconv.FormatInt(*f.v, 10)
}

func (f sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

func sizeVar(fs *flag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	fs.Var(sizeFlag{p}, name, usage)
}

// parseSize accepts an integer with an optional binary suffix.
func parseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, suf := range []struct {
		s string
		m int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if strings.HasSuffix(s, suf.s) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, suf.s)), suf.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (like 512, 64KiB, 8MiB)", v)
	}
	return n * mult, nil
}

// rangeFlag is a MIN-MAX size range.
type rangeFlag struct{ lo, hi *int }

func (f rangeFlag) String() string {
	if f.lo == nil {
		return ""
	}
	return fmt.Sprintf("%d-%d", *f.lo, *f.hi)
}

func (f rangeFlag) Set(s string) error {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return fmt.Errorf("%q is not MIN-MAX (like 0-16KiB)", s)
	}
	lo, err := parseSize(a)
	if err != nil {
		return err
	}
	hi, err := parseSize(b)
	if err != nil {
		return err
	}
	if lo > hi || hi > 64<<20 {
		return fmt.Errorf("%q: want MIN <= MAX <= 64MiB", s)
	}
	*f.lo, *f.hi = int(lo), int(hi)
	return nil
}

// shareFlag is a float64 in [0, 1].
type shareFlag struct{ v *float64 }

func (f shareFlag) String() string {
	if f.v == nil {
		return "0"
	}
	return strconv.FormatFloat(*f.v, 'g', -1, 64)
}

func (f shareFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return fmt.Errorf("%q is not a share in [0, 1]", s)
	}
	*f.v = v
	return nil
}

func shareVar(fs *flag.FlagSet, p *float64, name string, def float64, usage string) {
	*p = def
	fs.Var(shareFlag{p}, name, usage)
}
