package main

import (
	"context"
	"errors"
)

func cmdServe(ctx context.Context, e env, args []string) int {
	fs, l := newFlags(e, "serve")
	cfg, err := parse(e, fs, l, args, "star", "database-url")
	if err != nil {
		return exitCode(e, cfg, err)
	}
	db, err := openCurrentDB(ctx, cfg)
	if err != nil {
		return exitCode(e, cfg, err)
	}
	defer db.Close()
	return exitCode(e, cfg, errors.New("serve: the daemon is not built yet"))
}
