package bundle

import (
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// Topology is the storage topology of objstore.StarTopology, whose bucket
// policy it applies under the metastore's chain classes
// (catalog.ClassStandard, catalog.ClassExpress; settled objects are
// SettledClass).
func Topology(store objstore.Store, standard string, express []objstore.ZoneBucket, localZone, expressHow string, health *objstore.Health) (*objstore.Topology, error) {
	names := objstore.ClassNames{Standard: catalog.ClassStandard, Express: catalog.ClassExpress}
	return objstore.StarTopology(store, names, standard, express, localZone, expressHow, health)
}
