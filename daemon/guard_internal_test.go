package daemon

import (
	"errors"
	"testing"

	"github.com/nova/auditor/objstore"
)

// TestErasureHoldReason: a bucket that keeps deleted bytes, or whose rules
// could not be read, holds the erasures, named; one whose versioning the
// server does not say holds nothing (it is reported as unknown), nor does
// one never versioned.
func TestErasureHoldReason(t *testing.T) {
	verdicts := map[string]objstore.RulesVerdict{
		"off":     {Bucket: "off", Versioning: objstore.VersioningOff, ObjectLock: objstore.VerdictUnknown},
		"unknown": {Bucket: "unknown", Versioning: objstore.VerdictUnknown, ObjectLock: objstore.VerdictUnknown},
		"locked":  {Bucket: "locked", Versioning: objstore.VersioningEnabled, ObjectLock: objstore.VerdictYes},
	}
	failed := map[string]error{"down": errors.New("503 SlowDown")}
	for _, tc := range []struct {
		buckets []string
		want    string
	}{
		{[]string{"off", "unknown"}, ""},
		{nil, ""},
		{[]string{"off", "locked"}, "bucket locked: versioning enabled and Object Lock: a DELETE leaves the bytes"},
		{[]string{"down", "off"}, "bucket down: its rules could not be read (503 SlowDown)"},
	} {
		if got := erasureHoldReason(tc.buckets, verdicts, failed); got != tc.want {
			t.Errorf("buckets %v: %q, want %q", tc.buckets, got, tc.want)
		}
	}
}
