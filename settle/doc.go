// Package settle turns due streams into published, cataloged, create-once
// settled objects (docs/architecture.md#settling): resolve refs into chunks, plan
// outputs (a pure function), publish through objstore and commit through
// catalog.
package settle
