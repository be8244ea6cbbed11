// Package fleet is `auditor serve --stars`: one process among N
// interchangeable members that share the stars of a metastore, each star
// led by exactly one of them (docs/architecture.md#the-fleet). Safety is
// the per-star lease and its fencing token, unchanged; the fleet decides
// only who asks for which lease: claims by rendezvous preference under a
// cap, a liveness rule for stars unowned too long, balance with
// hysteresis, hand-offs on drain, and renewal only while a star's cycle
// loop makes progress.
package fleet
