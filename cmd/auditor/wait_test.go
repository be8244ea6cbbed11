package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
)

// fakeTriggerWaiter serves waitTrigger's reads from function fields.
type fakeTriggerWaiter struct {
	request func(n int) (catalog.AdminRequest, error) // n: the poll, from 0
	run     func(id int64) (catalog.Run, error)
	state   catalog.DaemonState
	polls   int
}

func (f *fakeTriggerWaiter) AdminRequest(context.Context, int64) (catalog.AdminRequest, error) {
	n := f.polls
	f.polls++
	return f.request(n)
}

func (f *fakeTriggerWaiter) Run(_ context.Context, id int64) (catalog.Run, error) {
	return f.run(id)
}

func (f *fakeTriggerWaiter) DaemonState(context.Context, string) (catalog.DaemonState, error) {
	return f.state, nil
}

// TestWaitTriggerOutcomes: what waitTrigger makes of each state of the
// request, its last run and the star: done 0; failed, a failed or halted
// run, a halted star 1; a run that ended ok leaving the request open
// (partly settled) keeps waiting; the timeout 7, or 5 when the database
// did not answer until then.
func TestWaitTriggerOutcomes(t *testing.T) {
	t.Parallel()
	now := time.Now()
	run7 := int64(7)
	open := catalog.AdminRequest{ID: 1, RequestedAt: now}
	taken := open
	taken.TakenAt, taken.ConsumedBy = &now, "d1"
	done := taken
	done.ConsumedAt, done.Outcome, done.RunID = &now, catalog.TriggerDone, &run7
	failed := done
	failed.Outcome, failed.Reason = catalog.TriggerFailed, "stream is quarantined"
	noted := taken
	noted.RunID, noted.Attempts, noted.LastError = &run7, 1, "failed: s3 down"
	runs := func(outcome string) func(int64) (catalog.Run, error) {
		return func(id int64) (catalog.Run, error) { return catalog.Run{ID: id, Outcome: outcome}, nil }
	}
	always := func(r catalog.AdminRequest) func(int) (catalog.AdminRequest, error) {
		return func(int) (catalog.AdminRequest, error) { return r, nil }
	}
	for _, tc := range []struct {
		name    string
		f       *fakeTriggerWaiter
		timeout time.Duration
		code    int
		err     error
		said    string
	}{
		{"done", &fakeTriggerWaiter{request: always(done)}, 0, exitOK, nil, "done: run 7"},
		{"failed", &fakeTriggerWaiter{request: always(failed)}, 0, exitFailure, nil, "stream is quarantined"},
		{"its cycle failed", &fakeTriggerWaiter{request: always(noted), run: runs(catalog.RunFailed)}, 0, exitFailure, nil, "ended failed: failed: s3 down"},
		{"its cycle halted", &fakeTriggerWaiter{request: always(noted), run: runs(catalog.RunHalted)}, 0, exitFailure, nil, "ended halted"},
		{"the star halted", &fakeTriggerWaiter{request: always(open), state: catalog.DaemonState{HaltedReason: "invariant"}}, 0, exitFailure, nil, "is halted (invariant)"},
		{"partly settled, then done", &fakeTriggerWaiter{request: func(n int) (catalog.AdminRequest, error) {
			if n < 2 {
				return noted, nil
			}
			return done, nil
		}, run: runs(catalog.RunOK)}, 0, exitOK, nil, "done: run 7"},
		{"not taken in time", &fakeTriggerWaiter{request: always(open)}, 300 * time.Millisecond, exitTimeout, nil, "not taken"},
		{"taken, not finished in time", &fakeTriggerWaiter{request: always(taken)}, 300 * time.Millisecond, exitTimeout, nil, "its cycle not finished"},
		{"the database did not answer", &fakeTriggerWaiter{request: func(int) (catalog.AdminRequest, error) {
			return catalog.AdminRequest{}, fmt.Errorf("read admin request 1: %w", catalog.ErrUnreachable)
		}}, 300 * time.Millisecond, exitOK, catalog.ErrUnreachable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errs bytes.Buffer
			code, err := waitTrigger(context.Background(), env{stdout: &out, stderr: &errs}, tc.f, "s1", 1, tc.timeout)
			if code != tc.code || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) ||
				!strings.Contains(out.String()+errs.String(), tc.said) {
				t.Fatalf("exit %d, err %v, said %q %q; want exit %d, err %v, saying %q", code, err, out.String(), errs.String(), tc.code, tc.err, tc.said)
			}
		})
	}
}

// TestWaitArgs: the older --wait DURATION becomes --wait --timeout
// DURATION; --wait alone, --wait=false and a value that is no duration
// (whose error then names --wait) are left as they are.
func TestWaitArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"--wait 30s --star s1", "--wait --timeout=30s --star s1"},
		{"-wait=5s", "--wait --timeout=5s"},
		{"--wait --timeout 1m", "--wait --timeout 1m"},
		{"--wait", "--wait"},
		{"--wait=false", "--wait=false"},
		{"--wait soon", "--wait=soon"},
		{"--star s1 --wait", "--star s1 --wait"},
		{"--wait 1d12h", "--wait --timeout=1d12h"},
	} {
		if got := strings.Join(waitArgs(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("waitArgs(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
