// Package daemon runs the auditor cycle (docs/architecture.md#the-cycle) under the
// star lease and its fencing token: schedule, admin requests, HTTP surface
// (/metrics, /healthz, /readyz, /status) and metrics.
package daemon
