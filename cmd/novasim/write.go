package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/logging"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
)

func cmdWrite(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	var o sim.WriteOptions
	wf := writeFlags(fs, &o)
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "database-url")
		if err != nil {
			return exitCode(e, cfg, err)
		}
		progress, put, err := wf.resolve(e, &o)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		log, err := newLogger(e, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		o.Logger = log
		db, st, err := openWith(ctx, cfg, false, put)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer db.Close()
		stars, err := starsToWrite(ctx, db, cfg.Star)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		o.Stop = drainOnInterrupt(ctx, e, cancel)

		p := newProgress(e.stderr, progress, o, len(stars))
		results := make([]sim.WriteStats, len(stars))
		errs := make([]error, len(stars))
		var wg sync.WaitGroup
		for i, star := range stars {
			so := o
			so.Star = star
			so.Session = uint64(time.Now().UnixNano())
			so.Progress = func(s sim.WriteStats) { p.update(i, s) }
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = sim.Write(ctx, db, st, so)
			}()
		}
		wg.Wait()
		p.finish()
		for i, s := range results {
			fmt.Fprintf(e.stdout, "star %s: %s\n", stars[i], describe(s))
		}
		for i, err := range errs {
			if err != nil {
				errs[i] = fmt.Errorf("star %s: %w", stars[i], err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return exitCode(e, cfg, err)
		}
		return exitOK
	}
}

// writeFlagValues are write's flags that need resolving after parsing.
type writeFlagValues struct {
	takeover, progress, slotSum string
}

// writeFlags defines write's flags: those that are options directly into
// o, the rest into the returned values.
func writeFlags(fs *cli.Flags, o *sim.WriteOptions) *writeFlagValues {
	var v writeFlagValues
	fs.Int64Var(&o.Flights, "flights", 0, "stop after `N` flights are written (per star)")
	fs.SizeVar(&o.Bytes, "bytes", 0, "stop after this many flight bytes are written (per star; KiB/MiB/GiB suffixes)")
	fs.DurationVar(&o.Duration, "duration", 0, "stop after this long (none of flights, bytes, duration: until interrupted)")
	fs.DurationVar(&o.FlightInterval, "flight-interval", 200*time.Millisecond, "flush a flight at least this often")
	fs.SizeVar(&o.FlightBytes, "flight-bytes", 1<<20, "or as soon as it holds this many bytes")
	fs.IntVar(&o.AbsorbFlights, "absorb-flights", 4, "`N` flights absorbed per metastore transaction")
	fs.IntVar(&o.MaxBatch, "max-batch", 32, "producer batch size of the hottest stream, `N` records")
	fs.SizeVar(&o.Rate, "rate", 0, "producer content bytes per second per star (0: as fast as possible)")
	fs.ShareVar(&o.Faults.Failover, "fail-failover", 0, "per flight: a new writer fences this one while its PUTs are in flight")
	fs.ShareVar(&o.Faults.Lost, "fail-lost", 0, "per flight: the flight is written and never absorbed")
	fs.ShareVar(&o.Faults.Crash, "fail-crash", 0, "per flight: the writer crashes between the PUT and its absorb")
	fs.ShareVar(&o.Faults.LostReply, "fail-lost-reply", 0, "per flight: the PUT's reply is lost; the writer knows its slot by the nonce")
	fs.ShareVar(&o.Faults.Erase, "erase-rate", 0, "per flight: once absorbed, record an erasure of 1 to 4 of its records")
	fs.DurationVar(&o.RetentionEvery, "retention-every", 0, "raise the low_record of a random stream to a random live record this often (0: never)")
	fs.StringVar(&v.takeover, "takeover", "auto", "`MODE`: auto (fence unless the star is pristine), always, or never (write at the current epoch: a stale writer)")
	fs.StringVar(&v.slotSum, "slot-checksum", "crc32c", "checksum `ALGORITHM` slots are stored with on S3: crc32c, crc32, sha256 or none (the server's default); "+
		"versitygw 1.8.0 can check a ranged copy's CRC-32C only from a source not stored with crc32c")
	fs.StringVar(&v.progress, "progress", "auto", "`MODE`: auto (a bar on a terminal, else a line every 5s), bar, line or none")
	return &v
}

// resolve checks the takeover, progress and slot checksum flags, sets
// o.Takeover, and returns the progress style and the slot PUT checksum.
func (v *writeFlagValues) resolve(e env, o *sim.WriteOptions) (string, objstore.ChecksumAlgorithm, error) {
	var none objstore.ChecksumAlgorithm
	switch v.takeover {
	case "auto":
		o.Takeover = sim.TakeoverAuto
	case "always":
		o.Takeover = sim.TakeoverAlways
	case "never":
		o.Takeover = sim.TakeoverNever
	default:
		return "", none, &config.Error{Field: "takeover", Msg: fmt.Sprintf("%q must be auto, always or never", v.takeover)}
	}
	progress := v.progress
	if progress == "auto" {
		progress = "line"
		if logging.IsTerminal(e.stderr) {
			progress = "bar"
		}
	}
	if progress != "bar" && progress != "line" && progress != "none" {
		return "", none, &config.Error{Field: "progress", Msg: fmt.Sprintf("%q must be auto, bar, line or none", progress)}
	}
	put, err := slotChecksum(v.slotSum)
	if err != nil {
		return "", none, err
	}
	return progress, put, nil
}

// starsToWrite is the star the flags name, or every star set up.
func starsToWrite(ctx context.Context, db *catalog.DB, star string) ([]string, error) {
	if star != "" {
		return []string{star}, nil
	}
	profs, err := writepath.New(db).Stars(ctx)
	if err != nil {
		return nil, err
	}
	var stars []string
	for _, p := range profs {
		stars = append(stars, p.Star)
	}
	if len(stars) == 0 {
		return nil, fmt.Errorf("%w: no star was set up (run novasim setup)", sim.ErrUsage)
	}
	return stars, nil
}

// drainOnInterrupt returns the writers' stop channel: the first interrupt
// closes it (stop producing, absorb what is written); the second cancels.
func drainOnInterrupt(ctx context.Context, e env, cancel context.CancelFunc) chan struct{} {
	stop := make(chan struct{})
	go func() {
		select {
		case <-e.signals:
		case <-ctx.Done():
			return
		}
		fmt.Fprintln(e.stderr, "\nnovasim: stopping: absorbing what is written (interrupt again to abort)")
		close(stop)
		select {
		case <-e.signals:
			cancel()
		case <-ctx.Done():
		}
	}()
	return stop
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func describe(s sim.WriteStats) string {
	secs := max(s.Elapsed.Seconds(), 1e-9)
	return fmt.Sprintf("%d flights (%d absorbed in %d transactions, %d never absorbed), %d records, %.1f MiB, %.1f flights/s, %.1f MiB/s; "+
		"epoch %d, %d fences, %d poisons; faults: %d failovers, %d crashes, %d lost, %d lost replies; %d retention moves; %d erasures of %d records; %s (PUTs %s, absorbs %s)",
		s.Flights, s.Absorbed, s.AbsorbTxs, s.Unabsorbed, s.Records, mib(s.FlightBytes), float64(s.Flights)/secs, mib(s.FlightBytes)/secs,
		s.Epoch, s.Fences, s.Poisons, s.Failovers, s.Crashes, s.LostFaults, s.LostReplies, s.Retention, s.Erasures, s.Erased, s.Elapsed.Round(time.Millisecond),
		s.PutTime.Round(time.Millisecond), s.AbsorbTime.Round(time.Millisecond))
}

// progress prints the writers' progress: a bar redrawn in place on a
// terminal, or a line every few seconds.
type progress struct {
	w     io.Writer
	mode  string
	o     sim.WriteOptions
	mu    sync.Mutex
	stats []sim.WriteStats
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer, mode string, o sim.WriteOptions, n int) *progress {
	return &progress{w: w, mode: mode, o: o, stats: make([]sim.WriteStats, n), last: time.Now()}
}

func (p *progress) update(i int, s sim.WriteStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats[i] = s
	switch p.mode {
	case "bar":
		fmt.Fprintf(p.w, "\r%s\033[K", p.line(true))
		p.drawn = true
	case "line":
		if time.Since(p.last) >= 5*time.Second {
			p.last = time.Now()
			fmt.Fprintln(p.w, p.line(false))
		}
	}
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

// line sums the stars' stats into one progress line.
func (p *progress) line(bar bool) string {
	var t sim.WriteStats
	for _, s := range p.stats {
		t.Flights += s.Flights
		t.Records += s.Records
		t.FlightBytes += s.FlightBytes
		t.Elapsed = max(t.Elapsed, s.Elapsed)
	}
	secs := max(t.Elapsed.Seconds(), 1e-9)
	n := int64(len(p.stats))
	frac := -1.0
	if p.o.Flights > 0 {
		frac = max(frac, float64(t.Flights)/float64(p.o.Flights*n))
	}
	if p.o.Bytes > 0 {
		frac = max(frac, float64(t.FlightBytes)/float64(p.o.Bytes*n))
	}
	if p.o.Duration > 0 {
		frac = max(frac, t.Elapsed.Seconds()/p.o.Duration.Seconds())
	}
	text := fmt.Sprintf("flights %d  records %d  %.1f MiB  %.1f flights/s  %.1f MiB/s",
		t.Flights, t.Records, mib(t.FlightBytes), float64(t.Flights)/secs, mib(t.FlightBytes)/secs)
	if frac < 0 {
		return text
	}
	frac = min(frac, 1)
	if !bar {
		return fmt.Sprintf("%3.0f%%  %s", frac*100, text)
	}
	const width = 24
	filled := int(frac * width)
	return fmt.Sprintf("[%s%s] %3.0f%%  %s", strings.Repeat("=", filled), strings.Repeat(" ", width-filled), frac*100, text)
}
