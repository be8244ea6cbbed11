package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/logging"
)

// newFlags returns a subcommand's flags with every configuration key bound;
// -h ends with the command's exit codes.
func newFlags(e env, name string) *cli.Flags {
	fs := cli.NewFlags(e.stdout, e.getenv, "auditor "+name)
	fs.Footer = commandExitsHelp(name)
	return fs
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

func cmdMigrate(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "migrate")
	cfg, err := fs.Load(args, "database-url")
	if err != nil {
		return exitCode(e, cfg, err)
	}
	db, err := openDB(ctx, cfg)
	if err != nil {
		return exitCode(e, cfg, err)
	}
	defer db.Close()
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
