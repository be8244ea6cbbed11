// Package logging builds the process logger: log/slog with lmittmann/tint
// for text and slog's JSON handler otherwise (--log-format; auto picks text
// on a terminal). Either way: keys are snake_case, a struct value is logged
// as a group of snake_case fields, and a key given by the logger's context
// (the star) is not repeated by a call. JSON logs durations as seconds
// (float); text only colours a terminal and stamps date and time.
package logging

import (
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/lmittmann/tint"
	"golang.org/x/term"
)

// TimeFormat is the text format's timestamp: date, time to the
// millisecond and the zone.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// New returns a logger writing to w in the given format (auto, text, json)
// at the given level (debug, info, warn, error).
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("log-level: %w", err)
	}
	tty := IsTerminal(w)
	if format == "auto" {
		format = "json"
		if tty {
			format = "text"
		}
	}
	switch format {
	case "text":
		h := tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: TimeFormat, NoColor: !tty,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return normalize(a, false) }})
		return slog.New(&dedup{Handler: h, keys: map[string]bool{}}), nil
	case "json":
		h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return normalize(a, true) }})
		return slog.New(&dedup{Handler: h, keys: map[string]bool{}}), nil
	}
	return nil, fmt.Errorf("log-format: %q must be auto, text or json", format)
}

// IsTerminal reports whether w is a terminal (for colours and progress bars).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// normalize makes one attribute's key snake_case and, for JSON, its
// duration a float of seconds; a plain struct becomes a group.
func normalize(a slog.Attr, jsonOut bool) slog.Attr {
	if a.Key != slog.TimeKey && a.Key != slog.LevelKey && a.Key != slog.MessageKey && a.Key != slog.SourceKey {
		a.Key = SnakeCase(a.Key)
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		if jsonOut {
			a.Value = slog.Float64Value(v.Duration().Seconds())
		}
	case slog.KindAny:
		if g, ok := structGroup(v.Any(), jsonOut); ok {
			a.Value = g
		}
	}
	return a
}

// structGroup turns a plain struct (not an error, a time, or a value with
// its own text or JSON form) into a group of its exported fields.
func structGroup(x any, jsonOut bool) (slog.Value, bool) {
	switch x.(type) {
	case error, time.Time, fmt.Stringer, json.Marshaler, encoding.TextMarshaler:
		return slog.Value{}, false
	}
	rv := reflect.ValueOf(x)
	if rv.Kind() != reflect.Struct {
		return slog.Value{}, false
	}
	rt := rv.Type()
	attrs := make([]slog.Attr, 0, rt.NumField())
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		attrs = append(attrs, normalize(slog.Any(f.Name, rv.Field(i).Interface()), jsonOut))
	}
	return slog.GroupValue(attrs...), true
}

// SnakeCase turns StreamsSettled, streamsSettled and reap-grace into
// streams_settled and reap_grace; S3Requests is s3_requests.
func SnakeCase(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case r == '-' || r == ' ' || r == '.':
			b.WriteByte('_')
		case unicode.IsUpper(r):
			prevLower := i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]))
			nextLower := i > 0 && i+1 < len(rs) && unicode.IsUpper(rs[i-1]) && unicode.IsLower(rs[i+1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// dedup drops a call's attribute whose key the logger's context already
// has (log.With("star", s) then log.Info(..., "star", s) logs it once).
type dedup struct {
	slog.Handler
	keys map[string]bool
}

func (d *dedup) WithAttrs(attrs []slog.Attr) slog.Handler {
	keys := make(map[string]bool, len(d.keys)+len(attrs))
	for k := range d.keys {
		keys[k] = true
	}
	for _, a := range attrs {
		keys[a.Key] = true
	}
	return &dedup{Handler: d.Handler.WithAttrs(attrs), keys: keys}
}

func (d *dedup) WithGroup(name string) slog.Handler {
	return &dedup{Handler: d.Handler.WithGroup(name), keys: map[string]bool{}}
}

func (d *dedup) Handle(ctx context.Context, r slog.Record) error {
	if len(d.keys) == 0 {
		return d.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if !d.keys[a.Key] {
			out.AddAttrs(a)
		}
		return true
	})
	return d.Handler.Handle(ctx, out)
}
