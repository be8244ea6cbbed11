package logging_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/logging"
)

// TestJSONIsSnakeCaseWithSecondsAndOneStar: durations are seconds, struct
// fields and keys are snake_case, and the logger's star is not repeated.
func TestJSONIsSnakeCaseWithSecondsAndOneStar(t *testing.T) {
	var buf bytes.Buffer
	log, err := logging.New(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log = log.With("star", "s1")
	log.Info("cycle", "star", "s1", "duration", 1500*time.Millisecond, "reap-grace", time.Minute,
		"counts", cycle.Counts{StreamsSettled: 3, S3Requests: 7})
	line := buf.String()
	if strings.Count(line, `"star"`) != 1 {
		t.Fatalf("star not exactly once: %s", line)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["duration"] != 1.5 || doc["reap_grace"] != 60.0 {
		t.Fatalf("durations are not seconds: %s", line)
	}
	counts, ok := doc["counts"].(map[string]any)
	if !ok || counts["streams_settled"] != 3.0 || counts["s3_requests"] != 7.0 {
		t.Fatalf("counts not snake_case: %s", line)
	}
}

// TestTextToAFileHasNoColoursAndADate: text written to a file (here a
// buffer, never a terminal) has no ANSI escapes and starts with the date.
func TestTextToAFileHasNoColoursAndADate(t *testing.T) {
	var buf bytes.Buffer
	log, err := logging.New(&buf, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("trim held by quarantine", "slot", "1/2", "err", "boom")
	line := buf.String()
	if strings.Contains(line, "\x1b[") {
		t.Fatalf("ANSI escapes in a file: %q", line)
	}
	if _, err := time.Parse(logging.TimeFormat, strings.Fields(line)[0]); err != nil {
		t.Fatalf("no date and time at the start of %q: %v", line, err)
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{"StreamsSettled": "streams_settled", "S3Requests": "s3_requests",
		"reap-grace": "reap_grace", "run_now": "run_now", "ObjectsReaped": "objects_reaped", "HTTPAddr": "http_addr"} {
		if got := logging.SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}
