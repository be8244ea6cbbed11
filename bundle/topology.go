package bundle

import (
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// Topology is the one statement of the slot-class policy
// (docs/architecture.md#buckets-and-zone-health): the standard bucket holds
// every settled object (SettledClass) and the slots of a standard chain;
// the slots of an express chain are in every bucket of the express set,
// reads and copies preferring localZone's bucket. With no express set the
// express class is left unconfigured: a read, copy or delete of an express
// slot fails naming how to configure it (expressHow, e.g. a flag). health
// is the zone health every set shares (nil: a fresh one).
func Topology(store objstore.Store, standard string, express []objstore.ZoneBucket, localZone, expressHow string, health *objstore.Health) (*objstore.Topology, error) {
	classes := map[string][]objstore.ZoneBucket{catalog.ClassStandard: {{Bucket: standard}}}
	if len(express) > 0 {
		classes[catalog.ClassExpress] = express
	}
	t, err := objstore.NewTopology(store, standard, classes, localZone, health)
	if err != nil {
		return nil, err
	}
	if len(express) == 0 {
		t.Unconfigured(catalog.ClassExpress, expressHow)
	}
	return t, nil
}
