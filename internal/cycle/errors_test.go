package cycle

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nova/auditor/catalog"
)

// TestErrorKinds: every error is exactly one of lease lost, halt,
// quarantine and retry, through any wrapping.
func TestErrorKinds(t *testing.T) {
	q := &QuarantineError{SlotKey: "k", Class: ClassChecksum, Err: errors.New("bad crc")}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"lease", fmt.Errorf("commit: %w", catalog.ErrStaleToken), "lease"},
		{"halt", fmt.Errorf("step: %w", Haltf("stream %x: overlap", 1)), "halt"},
		{"invariant", fmt.Errorf("commit: %w", catalog.ErrInvariant), "halt"},
		{"quarantine", fmt.Errorf("resolve: %w", q), "quarantine"},
		{"retry", errors.New("503 SlowDown"), "retry"},
		{"partial retry", &PartialError{Err: errors.New("503")}, "retry"},
	} {
		var got []string
		for kind, is := range map[string]func(error) bool{"lease": IsLeaseLost, "halt": IsHalt, "quarantine": IsQuarantine, "retry": IsRetry} {
			if is(tc.err) {
				got = append(got, kind)
			}
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: kinds %v, want [%s]", tc.name, got, tc.want)
		}
	}
	if IsRetry(nil) {
		t.Error("nil is a retry")
	}
	if got, ok := AsQuarantine(fmt.Errorf("x: %w", q)); !ok || got != q || q.Error() != "checksum in k: bad crc" {
		t.Errorf("AsQuarantine: %v %v %q", got, ok, q.Error())
	}
	if !IsPartial(&PartialError{Err: errors.New("503")}) || IsPartial(&PartialError{Err: Haltf("x")}) {
		t.Error("IsPartial")
	}
	if err := Haltf("cause: %w", catalog.ErrInvariant); err.Error() != "halt: cause: "+catalog.ErrInvariant.Error() {
		t.Errorf("Haltf: %q", err)
	}
}
