package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/nova/auditor/bundlefmt"
)

// The printer of `auditor inspect`: the format library decodes and
// validates; how an object is shown, and the exit codes, are the command's.

// inspectOptions select what inspectObject expects and prints.
type inspectOptions struct {
	Expect  bundlefmt.Expect // kind and key expectations; bundlefmt.KindUnknown sniffs; Key is printed when set
	File    string           // where the bytes came from, for messages and the summary
	JSON    bool             // one JSON document instead of the human summary
	Records bool             // add every record's length, timestamp, batch end, header count and content bytes
}

type inspectJSON struct {
	Kind         string      `json:"kind"`
	File         string      `json:"file,omitempty"`
	Key          string      `json:"key,omitempty"`
	ObjectSize   uint64      `json:"object_size"`
	FooterOffset uint64      `json:"footer_offset"`
	FooterLength uint64      `json:"footer_length"`
	Epoch        *uint64     `json:"epoch,omitempty"` // transit only
	Seq          *uint64     `json:"seq,omitempty"`   // transit only
	Nonce        *uint64     `json:"nonce,omitempty"` // transit only
	Chunks       []chunkJSON `json:"chunks"`
}

type chunkJSON struct {
	StreamID    bundlefmt.StreamID `json:"stream_id"`
	FirstRecord uint64             `json:"first_record"`
	RecordCount int                `json:"record_count"`
	DataOffset  uint64             `json:"data_offset"`
	ChunkBytes  uint64             `json:"chunk_bytes"`
	DataCRC     uint32             `json:"data_crc"`
	Records     []recordJSON       `json:"records,omitempty"`
}

type recordJSON struct {
	Record       uint64 `json:"record"`
	Length       uint32 `json:"length"`
	Timestamp    int64  `json:"timestamp"`
	BatchEnd     bool   `json:"batch_end"`
	HeaderCount  int    `json:"header_count"`
	ContentBytes int64  `json:"content_bytes"`
	Tombstone    bool   `json:"tombstone,omitempty"`
}

type errorJSON struct {
	Error   string `json:"error"`
	Class   string `json:"class"` // corrupt, checksum, unsupported_version
	Field   string `json:"field,omitempty"`
	Offset  int64  `json:"offset"`
	Version *int64 `json:"version,omitempty"`
}

// inspectObject validates obj completely (bundlefmt.ValidateObject) and prints a summary of
// it to stdout: human-readable, or JSON with opts.JSON. On failure it prints
// the error to stderr (and, with JSON, an error document to stdout). It
// returns the exit code: 0 valid, 3 corrupt, 4 unsupported version, 1 when
// writing fails.
func inspectObject(obj []byte, opts inspectOptions, stdout, stderr io.Writer) int {
	exp := opts.Expect
	if exp.Key == "" {
		exp.Key = opts.File // errors name the object by whatever we know
	}
	o, err := bundlefmt.ValidateObject(obj, exp)
	if err != nil {
		fmt.Fprintf(stderr, "inspect: %v\n", err)
		if opts.JSON {
			writeErrorJSON(stdout, err)
		}
		return inspectExitCode(err)
	}
	doc := summarize(obj, o, opts)
	if opts.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(doc)
	} else {
		err = writeHuman(stdout, doc)
	}
	if err != nil {
		fmt.Fprintf(stderr, "inspect: write: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func writeErrorJSON(w io.Writer, err error) {
	doc := errorJSON{Error: err.Error(), Class: bundlefmt.ClassOf(err)}
	if doc.Class == "" {
		doc.Class = bundlefmt.ClassCorrupt
	}
	var fe *bundlefmt.FormatError
	if errors.As(err, &fe) {
		doc.Field, doc.Offset = fe.Field, fe.Offset
		if doc.Class == bundlefmt.ClassUnsupported {
			doc.Version = &fe.Version
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(doc) // the exit code already reports the failure
}

func summarize(obj []byte, o *bundlefmt.Object, opts inspectOptions) inspectJSON {
	doc := inspectJSON{Kind: o.Kind.String(), File: opts.File, Key: opts.Expect.Key, ObjectSize: uint64(len(obj)), Chunks: []chunkJSON{}}
	if o.Kind != bundlefmt.KindSettled {
		env := o.Envelope
		doc.Epoch, doc.Seq, doc.Nonce = &env.Epoch, &env.Seq, &env.Nonce
		doc.FooterOffset, doc.FooterLength = env.FooterOffset, env.FooterLength
	}
	if o.Footer == nil {
		return doc
	}
	doc.FooterOffset, doc.FooterLength = o.Footer.FooterOffset(), o.Footer.FooterLength()
	for i := range o.Entries {
		e := &o.Entries[i]
		c := chunkJSON{
			StreamID:    e.Stream,
			FirstRecord: e.FirstRecord,
			RecordCount: e.Count(),
			DataOffset:  e.DataOffset,
			ChunkBytes:  e.ChunkBytes(),
			DataCRC:     e.DataCRC,
		}
		if opts.Records {
			data := o.ChunkData(obj, i)
			c.Records = make([]recordJSON, e.Count())
			var p uint64
			for j, l := range e.Lengths {
				info, _ := bundlefmt.ParseRecord(data[p : p+uint64(l)]) // validated above
				c.Records[j] = recordJSON{
					Record:       e.FirstRecord + uint64(j),
					Length:       l,
					Timestamp:    e.Timestamps[j],
					BatchEnd:     e.IsBatchEnd(j),
					HeaderCount:  info.Headers,
					ContentBytes: info.ContentBytes,
					Tombstone:    info.Tombstone,
				}
				p += uint64(l)
			}
		}
		doc.Chunks = append(doc.Chunks, c)
	}
	return doc
}

func writeHuman(w io.Writer, doc inspectJSON) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "kind\t%s\n", doc.Kind)
	if doc.File != "" {
		fmt.Fprintf(tw, "file\t%s\n", doc.File)
	}
	if doc.Key != "" {
		fmt.Fprintf(tw, "key\t%s\n", doc.Key)
	}
	fmt.Fprintf(tw, "object size\t%d\n", doc.ObjectSize)
	if doc.Epoch != nil {
		fmt.Fprintf(tw, "slot epoch\t%d\n", *doc.Epoch)
		fmt.Fprintf(tw, "seq\t%d\n", *doc.Seq)
		fmt.Fprintf(tw, "nonce\t0x%016x\n", *doc.Nonce)
	}
	if doc.Kind != bundlefmt.KindPoison.String() {
		fmt.Fprintf(tw, "footer\toffset %d, length %d (GET bytes=%d-%d)\n",
			doc.FooterOffset, doc.FooterLength, doc.FooterOffset, doc.FooterOffset+doc.FooterLength+bundlefmt.TrailerSize-1)
		var records, data, content uint64
		streams := 0
		for i, c := range doc.Chunks {
			records += uint64(c.RecordCount)
			data += c.ChunkBytes
			if i == 0 || c.StreamID != doc.Chunks[i-1].StreamID {
				streams++
			}
			for _, r := range c.Records {
				content += uint64(r.ContentBytes)
			}
		}
		fmt.Fprintf(tw, "chunks\t%d\n", len(doc.Chunks))
		fmt.Fprintf(tw, "streams\t%d\n", streams)
		fmt.Fprintf(tw, "records\t%d\n", records)
		fmt.Fprintf(tw, "data bytes\t%d\n", data)
		if len(doc.Chunks) > 0 && doc.Chunks[0].Records != nil {
			fmt.Fprintf(tw, "content bytes\t%d\n", content)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(doc.Chunks) == 0 {
		return nil
	}
	const chunkHead = "chunk\tstream\tfirst record\tcount\tdata offset\tbytes\tdata crc\n"
	chunkLine := func(tw io.Writer, i int, c chunkJSON) {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t0x%08x\n", i, c.StreamID, c.FirstRecord, c.RecordCount, c.DataOffset, c.ChunkBytes, c.DataCRC)
	}
	if doc.Chunks[0].Records == nil {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, chunkHead)
		for i, c := range doc.Chunks {
			chunkLine(tw, i, c)
		}
		return tw.Flush()
	}
	for i, c := range doc.Chunks {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, chunkHead)
		chunkLine(tw, i, c)
		if err := tw.Flush(); err != nil {
			return err
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "record\tlength\ttimestamp\tbatch end\theaders\tcontent bytes\t\n")
		for _, r := range c.Records {
			end := ""
			if r.BatchEnd {
				end = "end"
			}
			content := fmt.Sprint(r.ContentBytes)
			if r.Tombstone {
				content = "tombstone"
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%s\t\n", r.Record, r.Length, r.Timestamp, end, r.HeaderCount, content)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
