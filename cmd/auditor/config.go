package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/logging"
)

// newFlags returns a command's flags with every configuration key bound.
func newFlags(e env, c *cobra.Command) *cli.Flags {
	return cli.NewFlags(c, e.getenv)
}

// newLogger is the command's logger; every line names the star.
func newLogger(e env, cfg config.Config) (*slog.Logger, error) {
	log, err := logging.New(e.stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	if cfg.Star != "" {
		log = log.With("star", cfg.Star)
	}
	return log, nil
}

// openDB connects to the metastore (wire.DB: exit 5 when it does not
// answer, 2 when it refuses the URL).
func openDB(ctx context.Context, cfg config.Config) (*catalog.DB, error) {
	return wire.DB(ctx, cfg)
}

// openCurrentDB connects and verifies the schema is this binary's version.
func openCurrentDB(ctx context.Context, cfg config.Config) (*catalog.DB, error) {
	db, err := openDB(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := db.CheckSchema(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func cmdMigrate(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	status := fs.Bool("status", false, "print the database's schema version, this binary's and every migration applied or pending; change nothing (exit 0 current, the codes below when behind or ahead)")
	dryRun := fs.Bool("dry-run", false, "list the migrations migrate would apply; change nothing")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "database-url")
		if err == nil && *status && *dryRun {
			err = &config.Error{Field: "dry-run", Msg: "--status already changes nothing: use one of them"}
		}
		if err != nil {
			return exitCode(e, cfg, err)
		}
		db, err := openDB(ctx, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer db.Close()
		if *status || *dryRun {
			s, err := db.MigrationStatus(ctx)
			if err != nil {
				return exitCode(e, cfg, fmt.Errorf("migrate: %w", err))
			}
			if *status {
				return writeMigrateStatus(e.stdout, s)
			}
			return exitCode(e, cfg, writeMigrateDryRun(e.stdout, s))
		}
		applied, err := db.Migrate(ctx)
		if err != nil {
			return exitCode(e, cfg, fmt.Errorf("migrate: %w", err))
		}
		v, err := db.SchemaVersion(ctx)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if len(applied) == 0 {
			fmt.Fprintf(e.stdout, "schema version %d: already current\n", v)
		} else {
			fmt.Fprintf(e.stdout, "schema version %d: applied %v\n", v, applied)
		}
		return exitOK
	}
}
