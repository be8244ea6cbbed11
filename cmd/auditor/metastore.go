package main

import (
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/trim"
	"github.com/nova/auditor/verify"
)

// The one metastore, *catalog.DB over one pool, is what every step's own
// interface asks for: each step defines what it reads and writes in
// Postgres, and catalog imports none of them.
var (
	_ settle.Metastore         = (*catalog.DB)(nil)
	_ trim.Metastore           = (*catalog.DB)(nil)
	_ daemon.Metastore         = (*catalog.DB)(nil)
	_ daemon.FleetStatusReader = (*catalog.DB)(nil)
	_ verify.CatalogReader     = (*catalog.DB)(nil)
)
