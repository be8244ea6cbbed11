package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
)

// The waits of `auditor trigger --wait` and `auditor erase --wait`: they
// poll the metastore, where the leader records what came of the request,
// with backoff (nothing notifies on an outcome).

const (
	waitPollFirst = 100 * time.Millisecond
	waitPollMost  = 2 * time.Second
)

// waitArgs rewrites the older form of --wait, which was the bound of the
// wait itself (--wait 30s, --wait=30s), to --wait --timeout 30s. A value
// that is no duration stays attached to --wait, whose error names it.
func waitArgs(args []string) []string {
	out := make([]string, 0, len(args)+1)
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, v, attached := strings.Cut(a, "=")
		if name != "--wait" && name != "-wait" {
			out = append(out, a)
			continue
		}
		if !attached && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			v, attached = args[i+1], true
			i++
		}
		switch {
		case !attached:
			out = append(out, a)
		case isDuration(v):
			out = append(out, "--wait", "--timeout="+v)
		default:
			out = append(out, name+"="+v)
		}
	}
	return out
}

func isDuration(s string) bool {
	_, err := config.ParseDuration(s)
	return err == nil
}

// errWaitTimeout is a wait that --timeout ended (exit 7).
var errWaitTimeout = errors.New("the wait ran out")

// poll calls check with backoff until it reports done, the timeout (0:
// none) passes or ctx ends. An error the database may cure
// (catalog.IsRetryable) is retried; if the timeout passes while the
// database does not answer, the error is catalog.ErrUnreachable (exit 5),
// else errWaitTimeout. Any other error of check ends the wait with it.
func poll(ctx context.Context, timeout time.Duration, check func(context.Context) (bool, error)) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	delay := waitPollFirst
	var unanswered error
	for {
		done, err := check(ctx)
		switch {
		case err == nil:
			unanswered = nil
			if done {
				return nil
			}
		case ctx.Err() != nil:
		case catalog.IsRetryable(err):
			unanswered = err
		default:
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
			delay = min(2*delay, waitPollMost)
			continue
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ctx.Err()
		}
		if unanswered != nil {
			return fmt.Errorf("%w while waiting: %v", catalog.ErrUnreachable, unanswered)
		}
		return errWaitTimeout
	}
}

// triggerWaiter is what waitTrigger reads of the metastore.
type triggerWaiter interface {
	AdminRequest(ctx context.Context, id int64) (catalog.AdminRequest, error)
	Run(ctx context.Context, id int64) (catalog.Run, error)
	DaemonState(ctx context.Context, star string) (catalog.DaemonState, error)
}

// waitTrigger waits until a cycle has finished the trigger request id
// (docs/operations.md#operator-surface): exit 0 when its outcome is
// done; 1 when it failed, when the cycle that ran it failed or halted (the
// request stays open for the retry, or for auditor resume) or when the
// star is halted; 7 when the timeout came first; 5 when the database
// stopped answering until then.
func waitTrigger(ctx context.Context, e env, db triggerWaiter, star string, id int64, timeout time.Duration) (code int, err error) {
	start := time.Now()
	taken := false
	code = exitOK
	err = poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		r, err := db.AdminRequest(ctx, id)
		if err != nil {
			return false, err
		}
		if !taken && (r.TakenAt != nil || r.ConsumedAt != nil) {
			taken = true
			at := r.TakenAt
			if at == nil {
				at = r.ConsumedAt
			}
			fmt.Fprintf(e.stdout, "taken by %s after %s\n", r.ConsumedBy, at.Sub(r.RequestedAt).Round(time.Millisecond))
		}
		switch {
		case r.Outcome == catalog.TriggerDone:
			fmt.Fprintf(e.stdout, "done: run %d finished it after %s\n", deref(r.RunID), time.Since(start).Round(time.Millisecond))
			return true, nil
		case r.Outcome == catalog.TriggerFailed:
			fmt.Fprintf(e.stderr, "auditor: trigger request %d failed in run %d: %s\n", id, deref(r.RunID), r.Reason)
			code = exitFailure
			return true, nil
		case r.RunID != nil:
			// Still open after an attempt: a cycle that failed or halted
			// noted it; one that ended ok left it for the next cycle
			// (partly settled, or past the settle budget).
			run, err := db.Run(ctx, *r.RunID)
			if errors.Is(err, catalog.ErrNotFound) {
				break
			}
			if err != nil {
				return false, err
			}
			if run.Outcome == catalog.RunFailed || run.Outcome == catalog.RunHalted {
				fmt.Fprintf(e.stderr, "auditor: trigger request %d: the cycle that ran it (run %d) ended %s: %s; the request stays open and runs with the next cycle\n",
					id, run.ID, run.Outcome, r.LastError)
				code = exitFailure
				return true, nil
			}
		}
		st, err := db.DaemonState(ctx, star)
		if err != nil {
			return false, err
		}
		if st.Halted() {
			fmt.Fprintf(e.stderr, "auditor: trigger request %d: star %s is halted (%s): no cycle runs until auditor resume\n", id, star, st.HaltedReason)
			code = exitFailure
			return true, nil
		}
		return false, nil
	})
	if errors.Is(err, errWaitTimeout) {
		state := "not taken (is the star paused, or no leader running? see auditor status)"
		if taken {
			state = "taken, its cycle not finished"
		}
		fmt.Fprintf(e.stderr, "auditor: trigger request %d not finished within %s: %s; it stays recorded\n", id, timeout, state)
		return exitTimeout, nil
	}
	return code, err
}
