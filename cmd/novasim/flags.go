package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

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

// newFlags returns a command's flags with the shared keys bound.
func newFlags(e env, c *cobra.Command) *cli.Flags {
	return cli.NewFlags(c, e.getenv, sharedKeys...)
}

// exitCode reports err (without secrets) and maps it to an exit code:
// the auditor's (cli's) codes, a database that does not answer 5.
func exitCode(e env, cfg config.Config, err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, catalog.ErrUnreachable):
		fmt.Fprintf(e.stderr, "novasim: %s\n", cfg.Scrub(err.Error()))
		return cli.ExitUnreachable
	case errors.Is(err, config.ErrConfig), errors.Is(err, sim.ErrUsage), errors.Is(err, catalog.ErrRefused),
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

// open connects to the metastore (wire.DB: one that does not answer exits
// 5, one that refuses the URL is a configuration error naming the field)
// and builds the storage.
func open(ctx context.Context, cfg config.Config, migrate bool) (*catalog.DB, sim.Storage, error) {
	return openWith(ctx, cfg, migrate, "")
}

// openWith is open with slots stored under the checksum algorithm put on
// S3 ("" the default).
func openWith(ctx context.Context, cfg config.Config, migrate bool, put objstore.ChecksumAlgorithm) (*catalog.DB, sim.Storage, error) {
	db, err := wire.DB(ctx, cfg)
	if err != nil {
		return nil, sim.Storage{}, err
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
