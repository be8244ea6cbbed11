package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
)

// LsStream is one stream of `auditor ls --json`: its row and its catalog
// entries in record order.
type LsStream struct {
	Stream         string    `json:"stream"`
	Bucket         string    `json:"bucket"` // the key prefix bucket of its settled objects (streams.bucket)
	Class          string    `json:"class"`
	Epoch          int64     `json:"epoch"`
	LowRecord      int64     `json:"low_record"`
	SettledThrough int64     `json:"settled_through"`
	NextRecord     int64     `json:"next_record"`
	Entries        []LsEntry `json:"entries"`
}

// LsEntry is a catalog entry as `auditor ls` prints it.
type LsEntry struct {
	Key         string    `json:"key"`
	Epoch       int64     `json:"epoch"`
	FirstRecord int64     `json:"first_record"`
	RecordCount int64     `json:"record_count"`
	EndRecord   int64     `json:"end_record"` // one past its last record
	Revision    int32     `json:"revision"`
	ObjectBytes int64     `json:"object_bytes"`
	Class       string    `json:"class"`
	SettledAt   time.Time `json:"settled_at"`
}

// lsReader is what `auditor ls` reads of the metastore: reads only, so a
// read-only role may run it.
type lsReader interface {
	StreamsOfStar(ctx context.Context, star string) ([]catalog.Stream, error)
	Stream(ctx context.Context, id catalog.StreamID) (catalog.Stream, error)
	EntriesOfStream(ctx context.Context, id catalog.StreamID) ([]catalog.Entry, error)
}

// cmdLs is `auditor ls`: the catalog entries of a star's streams (or of
// --stream), as the metastore holds them; no lease, no write.
func cmdLs(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	fs.String("stream", "", "list the stream `ID` (uuid or 32 hex digits) only")
	asJSON := fs.Bool("json", false, "print JSON: {star, streams: [{stream, bucket, class, epoch, low_record, settled_through, next_record, entries: [{key, epoch, first_record, record_count, end_record, revision, object_bytes, class, settled_at}]}]}")
	return withAdmin(e, fs, func(a *adminCtx) int {
		if err := listCatalog(a.ctx, e.stdout, a.db.Streams(), a.cfg.Star, a.stream, *asJSON); err != nil {
			return a.fail(fmt.Errorf("ls: %w", err))
		}
		return exitOK
	})
}

// listCatalog writes the streams' entries stream by stream, so what it
// holds is one stream's entries however large the star (and, for the
// table, the lines it aligns: lsTextBlock at most).
func listCatalog(ctx context.Context, w io.Writer, db lsReader, star string, only *catalog.StreamID, asJSON bool) error {
	var streams []catalog.Stream
	if only != nil {
		st, err := db.Stream(ctx, *only)
		if err != nil {
			return err
		}
		streams = []catalog.Stream{st}
	} else {
		var err error
		if streams, err = db.StreamsOfStar(ctx, star); err != nil {
			return err
		}
	}
	var out lsWriter = &lsText{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if asJSON {
		out = &lsJSON{w: w, star: star}
	}
	for _, st := range streams {
		ens, err := db.EntriesOfStream(ctx, st.ID)
		if err != nil {
			return err
		}
		s := LsStream{Stream: st.ID.String(), Bucket: st.Bucket, Class: st.Class, Epoch: st.Epoch, LowRecord: st.LowRecord,
			SettledThrough: st.SettledThrough, NextRecord: st.NextRecord, Entries: make([]LsEntry, len(ens))}
		for i, en := range ens {
			s.Entries[i] = LsEntry{Key: bundle.EntryKey(st.Bucket, en), Epoch: en.Epoch, FirstRecord: en.FirstRecord,
				RecordCount: en.RecordCount, EndRecord: en.EndRecord(), Revision: en.Revision, ObjectBytes: en.ObjectBytes,
				Class: en.Class, SettledAt: en.SettledAt}
		}
		if err := out.stream(s); err != nil {
			return err
		}
	}
	return out.end(len(streams))
}

type lsWriter interface {
	stream(LsStream) error
	end(streams int) error
}

// lsText is the table: one line per entry, and a line for a stream with
// none. The table is aligned over up to lsTextBlock lines: the tabwriter
// holds them, and is flushed when it holds more (a star of more entries
// prints blocks, each aligned on its own) and at the end.
type lsText struct {
	tw      *tabwriter.Writer
	entries int
	lines   int
	started bool
}

// lsTextBlock is the most lines lsText aligns together.
const lsTextBlock = 4096

func (t *lsText) stream(s LsStream) error {
	if !t.started {
		t.started = true
		fmt.Fprintln(t.tw, "STREAM\tRECORDS\tCOUNT\tREVISION\tBYTES\tCLASS\tBUCKET\tKEY")
	}
	if len(s.Entries) == 0 {
		fmt.Fprintf(t.tw, "%s\t-\t0\t-\t-\t%s\t%s\t(no catalog entry; settled through %d of %d)\n",
			s.Stream, s.Class, s.Bucket, s.SettledThrough, s.NextRecord)
	}
	for _, en := range s.Entries {
		fmt.Fprintf(t.tw, "%s\t[%d, %d)\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Stream, en.FirstRecord, en.EndRecord, en.RecordCount,
			en.Revision, en.ObjectBytes, en.Class, s.Bucket, en.Key)
	}
	t.entries += len(s.Entries)
	t.lines += max(len(s.Entries), 1)
	if t.lines < lsTextBlock {
		return nil
	}
	t.lines = 0
	return t.tw.Flush()
}

func (t *lsText) end(streams int) error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(t.tw, "%d catalog entries of %d streams\n", t.entries, streams)
	if err != nil {
		return err
	}
	return t.tw.Flush()
}

// lsJSON writes one document, a stream at a time.
type lsJSON struct {
	w    io.Writer
	star string
	n    int
}

func (j *lsJSON) stream(s LsStream) error {
	if j.n == 0 {
		star, _ := json.Marshal(j.star)
		if _, err := fmt.Fprintf(j.w, "{\"star\":%s,\"streams\":[", star); err != nil {
			return err
		}
	} else if _, err := io.WriteString(j.w, ","); err != nil {
		return err
	}
	j.n++
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = j.w.Write(append([]byte("\n"), b...))
	return err
}

func (j *lsJSON) end(int) error {
	if j.n == 0 {
		star, _ := json.Marshal(j.star)
		_, err := fmt.Fprintf(j.w, "{\"star\":%s,\"streams\":[]}\n", star)
		return err
	}
	_, err := io.WriteString(j.w, "\n]}\n")
	return err
}
