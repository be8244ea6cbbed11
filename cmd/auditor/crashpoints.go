package main

import (
	"slices"

	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/reconcile"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/trim"
)

// crashPoints is the one list of crash points, in cycle order: each step's
// own (declared beside the code that places them), then the daemon's. It is
// what NOVA_AUDITOR_CRASHPOINT accepts and `auditor crashpoints` prints.
func crashPoints() []crashpoint.Point {
	return slices.Concat(settle.CrashPoints(), trim.CrashPoints(), daemon.CrashPoints(), reconcile.CrashPoints())
}
