package main

import (
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/trim"
)

// trimReader is the daemon's view of trim (status, /status, the gauges):
// trim's own, shown as it decides.
func trimReader(db trim.StatusCatalog) daemon.TrimReader { return trim.Viewer{DB: db} }
