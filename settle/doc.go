// Package settle turns due streams into published, cataloged, create-once
// settled objects (DESIGN.md section 3): resolve refs into chunks, plan
// outputs (a pure function), publish through objstore and commit through
// catalog.
package settle
