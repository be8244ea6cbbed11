// Package testenv gives integration tests the real services started by
// scripts/test-services.sh: a fresh, migrated Postgres database per test and
// a fresh bucket per test on the real S3 server (versitygw). When the
// services are not configured, tests skip with the reason, unless
// NOVA_TEST_REQUIRE_SERVICES=1 (set by make test), in which case they fail.
package testenv
