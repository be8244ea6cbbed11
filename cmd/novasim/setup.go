package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
)

func cmdSetup(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	def := sim.DefaultContent(0)
	var (
		o       sim.SetupOptions
		buckets string
		migrate bool
		seed    uint64
	)
	o.Content = def
	fs.IntVar(&o.Streams, "streams", 100, "`N` streams in all, over both stars")
	fs.ShareVar(&o.ExpressShare, "express-share", 0, "share of the streams on the express star (0: no express star)")
	fs.StringVar(&o.ExpressStar, "express-star", "", "`NAME` of the express star (default <star>-x)")
	fs.StringVar(&buckets, "stream-buckets", "b0", "Nova `BUCKETS` of the streams' settled objects, comma-separated, dealt round-robin")
	fs.IntVar(&o.FenceWindow, "fence-window", 4, "the stars' fence_window: at most `N` slot PUTs a writer has in flight")
	fs.Uint64Var(&seed, "seed", 1, "content `SEED`: with the stream and record number it determines every record (recorded for check)")
	fs.SizeRangeVar(&o.Content.MinBytes, &o.Content.MaxBytes, "record-bytes", 64<<20, "content bytes per record, MIN-MAX, skewed toward small")
	fs.ShareVar(&o.Content.HeaderShare, "headers", def.HeaderShare, "share of records with headers")
	fs.ShareVar(&o.Content.EmptyShare, "empty-share", def.EmptyShare, "share of records with an empty body")
	fs.BoolVar(&migrate, "migrate", false, "apply the schema migrations first")
	createBuckets := fs.Bool("create-buckets", false, "create the standard and express buckets first (S3 or file backend)")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "database-url", "star")
		if err != nil {
			return exitCode(e, cfg, err)
		}
		o.Star = cfg.Star
		o.Content.Seed = seed
		o.StreamBuckets = strings.Split(buckets, ",")
		db, st, err := open(ctx, cfg, migrate)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer db.Close()
		if *createBuckets {
			store, ok := st.Store.(objstore.Store)
			if !ok {
				return exitCode(e, cfg, fmt.Errorf("create buckets: the store %T cannot", st.Store))
			}
			if err := wire.CreateBuckets(ctx, cfg, store); err != nil {
				return exitCode(e, cfg, err)
			}
		}
		fx, err := sim.Setup(ctx, db, o)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		for _, s := range fx.Stars {
			fmt.Fprintf(e.stdout, "star %s: %s, %d streams, fence window %d, seed %d\n", s.Star, s.Class, len(s.Streams), o.FenceWindow, seed)
		}
		return exitOK
	}
}
