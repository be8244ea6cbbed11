package sim

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"sort"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// readWindow bounds one ranged read of chunk data: check never holds more
// of an object than this (plus one record larger than it).
const readWindow = 8 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// read reads [off, off+n) of key from the first bucket that has it (the
// preferred bucket first), retrying transient failures.
func (c *checker) read(ctx context.Context, buckets []string, key string, off, n int64) ([]byte, int64, error) {
	var last error
	for _, b := range buckets {
		for attempt := 0; attempt < 4; attempt++ {
			if attempt > 0 {
				if err := sleepCtx(ctx, backoff(attempt)); err != nil {
					return nil, 0, err
				}
			}
			data, size, err := c.st.Store.GetRange(ctx, b, key, off, n)
			if err == nil {
				return data, size, nil
			}
			last = err
			if !objstore.IsRetryable(err) || ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
	}
	return nil, 0, last
}

// checkSettled verifies one catalog entry: its object's footer against the
// row, and every record against the generator.
func (c *checker) checkSettled(ctx context.Context, star string, content Content, s *streamState, e catalog.Entry) error {
	key := bundlefmt.SettledKey(s.Bucket, s.id, uint64(e.Epoch), uint64(e.FirstRecord), uint32(e.Revision))
	note := func(format string, args ...any) {
		c.finding(Finding{Kind: "invariant", Star: star, Stream: s.id.String(), Record: e.FirstRecord, Key: key,
			Detail: fmt.Sprintf(format, args...)})
	}
	bad := func(format string, args ...any) error {
		note(format, args...)
		return nil
	}
	buf, size, err := c.read(ctx, []string{c.st.Standard}, key, e.FooterOffset, e.FooterLength+bundlefmt.TrailerSize)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	c.mu.Lock()
	c.rep.Objects++
	c.mu.Unlock()
	if err != nil {
		return bad("read the footer of a cataloged object: %v", err)
	}
	if size != e.ObjectBytes {
		return bad("object is %d bytes, the catalog says %d", size, e.ObjectBytes)
	}
	f, err := bundlefmt.OpenFooter(key, uint64(e.FooterOffset), buf, uint64(size), bundlefmt.SettledBase)
	if err == nil {
		err = f.VerifyDirectory()
	}
	if err != nil {
		return bad("footer: %v", err)
	}
	next := e.FirstRecord
	minTS, maxTS := int64(1<<63-1), int64(-1<<63)
	jobs := make([]chunkJob, 0, f.NumChunks())
	for i := 0; i < f.NumChunks(); i++ {
		v, err := f.EntryView(i)
		if err != nil {
			return bad("entry %d: %v", i, err)
		}
		if v.Stream() != s.id {
			return bad("chunk %d is of stream %s", i, v.Stream())
		}
		if int64(v.FirstRecord()) != next {
			return bad("chunk %d starts at record %d, want %d", i, v.FirstRecord(), next)
		}
		next = int64(v.EndRecord())
		for j := 0; j < v.Count(); j++ {
			minTS, maxTS = min(minTS, v.Timestamp(j)), max(maxTS, v.Timestamp(j))
		}
		jobs = append(jobs, chunkJob{view: v, off: f.DataOffset(i), s: s, lo: e.FirstRecord, hi: e.EndRecord()})
	}
	if next != e.EndRecord() {
		note("object holds records [%d, %d), the catalog says [%d, %d)", e.FirstRecord, next, e.FirstRecord, e.EndRecord())
	}
	if minTS != e.MinTimestamp || maxTS != e.MaxTimestamp {
		note("timestamps span [%d, %d], the catalog says [%d, %d]", minTS, maxTS, e.MinTimestamp, e.MaxTimestamp)
	}
	return c.verifyData(ctx, star, []string{c.st.Standard}, key, jobs, NewGen(content), true)
}

// chunkJob is one chunk to verify: records in [lo, hi) are counted, the
// others only verified.
type chunkJob struct {
	view   bundlefmt.EntryView
	off    uint64
	s      *streamState
	lo, hi int64
}

// verifyData reads the jobs' chunks of one object, coalescing neighbours
// into reads of at most readWindow bytes, and verifies every record.
func (c *checker) verifyData(ctx context.Context, star string, buckets []string, key string, jobs []chunkJob, gen *Gen, settled bool) error {
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].off < jobs[j].off })
	for i := 0; i < len(jobs); {
		start := jobs[i].off
		end := start + jobs[i].view.ChunkBytes()
		j := i + 1
		for j < len(jobs) && jobs[j].off >= end && jobs[j].off-end <= 64<<10 &&
			jobs[j].off+jobs[j].view.ChunkBytes()-start <= readWindow {
			end = jobs[j].off + jobs[j].view.ChunkBytes()
			j++
		}
		if j == i+1 && end-start > readWindow {
			// One large chunk: read it in record-aligned pieces.
			job := jobs[i]
			err := c.verifyChunk(star, key, job, gen, settled, func(from, n uint64) ([]byte, error) {
				b, _, err := c.read(ctx, buckets, key, int64(job.off+from), int64(n))
				if err == nil && uint64(len(b)) != n {
					err = fmt.Errorf("short read: %d of %d bytes", len(b), n)
				}
				return b, err
			})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			_ = err
			i = j
			continue
		}
		data, _, err := c.read(ctx, buckets, key, int64(start), int64(end-start))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil && uint64(len(data)) != end-start {
			err = fmt.Errorf("short read: %d of %d bytes", len(data), end-start)
		}
		for k := i; k < j; k++ {
			job := jobs[k]
			if err != nil {
				c.unreadable(star, key, job, err)
				continue
			}
			base := job.off - start
			_ = c.verifyChunk(star, key, job, gen, settled, func(from, n uint64) ([]byte, error) {
				return data[base+from : base+from+n], nil
			})
		}
		i = j
	}
	return nil
}

func (c *checker) unreadable(star, key string, job chunkJob, err error) {
	c.finding(Finding{Kind: "unreadable", Star: star, Stream: job.s.id.String(), Record: int64(job.view.FirstRecord()), Key: key,
		Detail: fmt.Sprintf("chunk of %d records: %v", job.view.Count(), err)})
}

// verifyChunk checks one chunk: its DataCRC, each stored record's bytes and
// timestamp against the generator (a tombstone is right only in a settled
// object, for an erased record), and notes every record's copy.
func (c *checker) verifyChunk(star, key string, job chunkJob, gen *Gen, settled bool, piece func(from, n uint64) ([]byte, error)) error {
	v := job.view
	n := v.Count()
	first := int64(v.FirstRecord())
	ok := make([]bool, n)
	var crc uint32
	var pos uint64
	var expect []byte
	reported := 0
	for r := 0; r < n; {
		k, plen := r, uint64(0)
		for k < n && (plen == 0 || plen+uint64(v.Length(k)) <= readWindow) {
			plen += uint64(v.Length(k))
			k++
		}
		data, err := piece(pos, plen)
		if err != nil {
			c.unreadable(star, key, job, err)
			return err
		}
		crc = crc32.Update(crc, castagnoli, data)
		p := uint64(0)
		for i := r; i < k; i++ {
			l := uint64(v.Length(i))
			stored := data[p : p+l]
			p += l
			rec := first + int64(i)
			want, ts := gen.Record(job.s.prof, rec)
			expect, _ = bundlefmt.AppendRecord(expect[:0], want)
			erased, applied := job.s.erasedAt(rec)
			var why string
			switch {
			case v.Timestamp(i) != ts:
				why = fmt.Sprintf("timestamp %d, want %d", v.Timestamp(i), ts)
			case bundlefmt.IsTombstone(stored):
				switch {
				case !settled:
					why = "a tombstone in a slot (the write path never writes one)"
				case !erased:
					why = "a tombstone where no erasure applies"
				}
			case settled && applied:
				why = "an erased record (erasure applied) still holds its bytes"
			case !bytes.Equal(stored, expect):
				why = describeDiff(stored, expect)
			}
			ok[i] = why == ""
			if !ok[i] && reported < 3 {
				reported++
				c.finding(Finding{Kind: "wrong", Star: star, Stream: job.s.id.String(), Record: rec, Key: key, Detail: why})
			}
		}
		pos += plen
		r = k
	}
	if crc != v.DataCRC() {
		c.finding(Finding{Kind: "wrong", Star: star, Stream: job.s.id.String(), Record: first, Key: key,
			Detail: fmt.Sprintf("chunk DataCRC 0x%08x, bytes have 0x%08x", v.DataCRC(), crc)})
		for i := range ok {
			ok[i] = false
		}
	}
	for i := range ok {
		rec := first + int64(i)
		job.s.note(rec, ok[i], settled, rec >= job.lo && rec < job.hi)
	}
	return nil
}

// describeDiff says how a stored record differs from the generator's.
func describeDiff(stored, want []byte) string {
	got, err := bundlefmt.DecodeRecord(stored)
	if err != nil {
		return fmt.Sprintf("stored record does not decode: %v", err)
	}
	exp, _ := bundlefmt.DecodeRecord(want)
	switch {
	case len(got.Headers) != len(exp.Headers):
		return fmt.Sprintf("%d headers, want %d", len(got.Headers), len(exp.Headers))
	case len(got.Body) != len(exp.Body):
		return fmt.Sprintf("body of %d bytes, want %d", len(got.Body), len(exp.Body))
	case !bytes.Equal(got.Body, exp.Body):
		return "body bytes differ"
	}
	return fmt.Sprintf("stored bytes differ (%d stored, %d expected)", len(stored), len(want))
}
