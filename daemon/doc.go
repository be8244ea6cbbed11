// Package daemon runs the auditor cycle (DESIGN.md section 2) under the
// star lease and its fencing token: schedule, admin requests, HTTP surface
// (/metrics, /healthz, /readyz, /status) and metrics.
package daemon
