package main

import (
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/fleet"
	"github.com/nova/auditor/reconcile"
	"github.com/nova/auditor/rewind"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/trim"
	"github.com/nova/auditor/verify"
)

// The one metastore, *catalog.DB over one pool, hands out one type per
// concern, and each is what one step's own interface asks for: each step
// defines what it reads and writes in Postgres, and catalog imports none
// of them.
var (
	_ settle.Metastore         = (*catalog.Settle)(nil)
	_ trim.Metastore           = (*catalog.Trim)(nil)
	_ trim.IdleReader          = (*catalog.Trim)(nil)
	_ daemon.Metastore         = (*catalog.Ledger)(nil)
	_ daemon.Leases            = (*catalog.Leases)(nil)
	_ daemon.Requests          = (*catalog.Requests)(nil)
	_ daemon.FleetStatusReader = (*catalog.Fleet)(nil)
	_ fleet.Metastore          = (*catalog.Fleet)(nil)
	_ reconcile.Catalog        = (*catalog.Restore)(nil)
	_ rewind.Catalog           = (*catalog.Restore)(nil)
	_ verify.CatalogReader     = (*catalog.Streams)(nil)
)
