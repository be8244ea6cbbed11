package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/sim"
)

// cmdErase is `novasim erase`: it records erasures of a star's records as
// the write path's users would (catalog.Erasures.RecordErasure, as auditor erase
// does): one range (--stream, --from, --count), or --random N of them over
// the star's settled and unsettled records. The auditor's next cycle
// applies them; novasim check then expects tombstones exactly there.
func cmdErase(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	var (
		stream      string
		from, count int64
		o           sim.EraseOptions
		asJSON      bool
	)
	fs.StringVar(&stream, "stream", "", "the stream `ID` (uuid or 32 hex digits) of the range to erase")
	fs.Int64Var(&from, "from", 0, "the range's first `RECORD`")
	fs.Int64Var(&count, "count", 0, "the range's length, `N` records")
	fs.IntVar(&o.Random, "random", 0, "record `N` erasures of random ranges instead, alternating between settled and unsettled records")
	fs.Int64Var(&o.MaxRecords, "max-records", 4, "with --random: at most `N` records per erasure")
	fs.Uint64Var(&o.Seed, "seed", 0, "with --random: the draws' `SEED` (0: random)")
	fs.BoolVar(&asJSON, "json", false, "print what was recorded as JSON")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "database-url", "star")
		if err != nil {
			return exitCode(e, cfg, err)
		}
		set := map[string]bool{}
		fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
		explicit := set["stream"] || set["from"] || set["count"]
		switch {
		case explicit && set["random"]:
			return exitCode(e, cfg, &config.Error{Field: "random", Msg: "either --random or --stream/--from/--count, not both"})
		case !explicit && !set["random"]:
			return exitCode(e, cfg, &config.Error{Field: "stream", Msg: "is required (with --from and --count), or --random N"})
		case explicit && !(set["stream"] && set["from"] && set["count"]):
			return exitCode(e, cfg, &config.Error{Field: "count", Msg: "--stream, --from and --count go together"})
		case set["random"] && o.Random <= 0:
			return exitCode(e, cfg, &config.Error{Field: "random", Msg: fmt.Sprintf("%d must be positive", o.Random)})
		case o.MaxRecords <= 0:
			return exitCode(e, cfg, &config.Error{Field: "max-records", Msg: fmt.Sprintf("%d must be positive", o.MaxRecords)})
		}
		var id catalog.StreamID
		if explicit {
			if id, err = bundlefmt.ParseStreamID(stream); err != nil {
				return exitCode(e, cfg, &config.Error{Field: "stream", Msg: err.Error()})
			}
		}
		db, err := wire.DB(ctx, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer db.Close()
		if err := db.CheckSchema(ctx); err != nil {
			return exitCode(e, cfg, fmt.Errorf("%w (novasim setup --migrate applies the migrations)", err))
		}
		var st sim.EraseStats
		if explicit {
			got, err := sim.EraseRange(ctx, db, cfg.Star, id, from, count)
			if err != nil {
				return exitCode(e, cfg, err)
			}
			st = sim.EraseStats{Recorded: 1, Records: got.RecordCount, Erasures: []catalog.Erasure{got}}
		} else {
			o.Star = cfg.Star
			if st, err = sim.Erase(ctx, db, o); err != nil {
				return exitCode(e, cfg, err)
			}
		}
		if asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(st); err != nil {
				return exitCode(e, cfg, err)
			}
			return exitOK
		}
		for _, x := range st.Erasures {
			state := "pending"
			if x.Applied {
				state = "applied"
			}
			fmt.Fprintf(e.stdout, "erasure %s [%d, %d) %s\n", x.Stream, x.FirstRecord, x.EndRecord(), state)
		}
		fmt.Fprintf(e.stdout, "star %s: %d erasures recorded (%d of settled records, %d of unsettled ones), %d records; %d draws skipped\n",
			cfg.Star, st.Recorded, st.Settled, st.Unsettled, st.Records, st.Skipped)
		return exitOK
	}
}
