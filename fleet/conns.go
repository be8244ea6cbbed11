package fleet

import "fmt"

// A member's connections to Postgres have one bound, --fleet-max-conns
// (docs/operations.md#connections): its leases' pool, its LISTEN
// connection and its cycles' pool, which the led stars' daemons share
// between cycles. Unset, the bound is DefaultMaxConns(--fleet-cycles):
// this is the one place that default is stated.
const (
	// LeasePoolConns is the member loop's pool: the round, the renewals
	// and a spare for the hand-offs of a drain while both run. It is held
	// open for the member's life, so that a renewal never waits on a
	// connection the server may refuse.
	LeasePoolConns = 3
	// ListenConns is the member's one LISTEN connection.
	ListenConns = 1
	// DaemonConns are for the led stars' daemons between cycles: gauge
	// refreshes, admin polls, the guard's checks (each a short read).
	DaemonConns = 2
	// CycleConns are for one running cycle: its statements are short and
	// its settle workers take turns on them (a cycle's S3 work, not its
	// statements, is what takes time).
	CycleConns = 4
)

// DefaultMaxConns is a member's bound for cycles cycle slots.
func DefaultMaxConns(cycles int) int {
	return LeasePoolConns + ListenConns + DaemonConns + cycles*CycleConns
}

// minCyclePool is the smallest cycles' pool a bound may leave.
const minCyclePool = 2

// Pools splits a member's bound into its two pools: the leases' pool and
// the cycles' pool (the LISTEN connection is taken from the leases' pool
// and leaves it, so the pool may open another). 0 is the default bound.
func Pools(maxConns, cycles int) (leases, cyclePool int32, err error) {
	if maxConns == 0 {
		maxConns = DefaultMaxConns(cycles)
	}
	if lo := LeasePoolConns + ListenConns + minCyclePool; maxConns < lo {
		return 0, 0, fmt.Errorf("%d connections leave no room for cycles: at least %d", maxConns, lo)
	}
	return LeasePoolConns, int32(maxConns - LeasePoolConns - ListenConns), nil
}
