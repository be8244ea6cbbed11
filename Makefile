# Nova auditor. `make help` lists the targets.
GO       ?= go
# The version is defined once, in cmd/auditor/version.go; BUILD is its
# build metadata (the source revision).
VERSION  := $(shell sed -n 's/^const release = "\(.*\)"$$/\1/p' cmd/auditor/version.go)
BUILD    ?= $(shell git describe --always --dirty 2>/dev/null)
LDFLAGS  := -s -w -X main.build=$(BUILD)
BIN      := bin
SOAK_DURATION ?= 10m
EXPLORE_DURATION ?= 10m

.PHONY: help version build test demo-check test-compat test-short soak soak-fleet explore explore-mutants demo restore-drill trace-settle bench bench-sql bench-scale bench-settle bench-tail bench-erase bench-verify bench-fleet mixin lint services-up services-down clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

version: ## print the auditor's version (cmd/auditor/version.go)
	@echo $(VERSION)

build: ## build bin/auditor and bin/novasim (static, trimmed, the revision stamped)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

test: lint demo-check ## lint, the demo's database check, then start versitygw (and Postgres if none runs), run every test against them, stop them
	scripts/test.sh

demo-check: build ## make demo's database path on a throwaway Postgres that asks a password over TCP (scram-sha-256): NOVA_DEMO_DATABASE_URL, and the fallback to a throwaway cluster (about 15 s)
	scripts/demo-check.sh

test-compat: ## against SeaweedFS (weed mini, built into .bin the first time: 5-9 min): the store contract, auditor doctor, the demo, the live-traffic test (COMPAT_LIVE_DURATION, default 20s)
	scripts/test-compat.sh

soak: ## the live-traffic test (auditor serve under novasim write and random kills) on both backends for SOAK_DURATION (default 10m)
	NOVA_LIVE_DURATION=$(SOAK_DURATION) NOVA_TEST_TIMEOUT=0 scripts/test.sh -run '^TestLiveTraffic$$' -v ./cmd/auditor

soak-fleet: ## the fleet under random kills, drains, pauses and scaling (auditor serve --stars all, 2-6 members, 16 stars, novasim write) for SOAK_DURATION (default 10m)
	NOVA_FLEET_SOAK=$(SOAK_DURATION) NOVA_TEST_TIMEOUT=0 scripts/test.sh -run '^TestFleetSoak$$' -v ./cmd/auditor

explore: ## the seeded fault explorer for EXPLORE_DURATION (default 10m) over both backends: episodes run, faults by kind, crash and pause points reached, failures with the command that replays each
	NOVA_EXPLORE_DURATION=$(EXPLORE_DURATION) NOVA_TEST_TIMEOUT=0 scripts/test.sh -run '^TestExplore$$' -v ./cmd/auditor

explore-mutants: ## the explorer with each rule switched off in turn (late-delete, unfenced-commit, adoption-bytes, erase-tail-rewrite) on the file backend for EXPLORE_DURATION each: passes when each break is found
	for m in late-delete unfenced-commit adoption-bytes erase-tail-rewrite; do \
		NOVA_EXPLORE_MUTATION=$$m NOVA_EXPLORE_BACKENDS=file NOVA_EXPLORE_DURATION=$(EXPLORE_DURATION) NOVA_TEST_TIMEOUT=0 \
			scripts/test.sh -run '^TestExplore$$' -v ./cmd/auditor || exit 1; \
	done

test-short: ## unit tests only (integration tests skip without services)
	$(GO) test -short ./...

demo: build ## the main job end to end on a fresh database (NOVA_DEMO_DATABASE_URL, else the local Postgres, else a throwaway cluster) and the file-backed store
	scripts/demo.sh

restore-drill: build ## the metastore restored from a backup behind the store, end to end on the file store: the halt, auditor reconcile, cycles and checks (DRILL_STREAMS, DRILL_FLIGHTS, DRILL_ROUNDS)
	scripts/restore-drill.sh

trace-settle: ## the files and packages one settle of one stream runs (coverage with and without it; needs services-up)
	scripts/trace-settle.sh

bench: ## benchmarks (format, planner, pendingobj, objstore against versitygw)
	NOVA_TEST_TIMEOUT=30m scripts/test.sh -run '^$$' -bench . -benchmem ./...

bench-sql: ## plans of every per-cycle statement at 10^4, 10^5 and 10^6 rows of history, and transactions per settled object
	NOVA_SQL_SCALE_FULL=1 NOVA_TEST_TIMEOUT=30m scripts/test.sh -v -run 'TestPerCycleStatementsFlat' ./catalog/
	scripts/test.sh -v -run 'TestTransactionsPerSettledObject' ./cmd/auditor/

bench-scale: bench-sql ## one star of production shape (100k streams, 10^6 entries, a year of ledger, 10k due, a 10^7 backlog); small streams at 30 ms S3 latency
	NOVA_BENCH_SCALE=1 NOVA_TEST_TIMEOUT=90m scripts/test.sh -v -run 'TestScaleStar' ./cmd/auditor/
	NOVA_BENCH_SCALE=1 NOVA_SCALE_GOMEMLIMIT=200MiB NOVA_TEST_TIMEOUT=90m scripts/test.sh -v -run 'TestScaleStar' ./cmd/auditor/
	NOVA_BENCH_BACKLOG=10000000 NOVA_BENCH_STREAMS=10000 NOVA_TEST_TIMEOUT=90m scripts/test.sh -run '^$$' \
		-bench 'BenchmarkHotBacklogPeakRSS|BenchmarkManySmallStreamsAtS3Latency' -benchtime 1x ./settle/

bench-erase: ## erase one record from each of N full settled objects (NOVA_BENCH_ERASE_OBJECTS=2, NOVA_BENCH_ERASE_CAP_MIB=256, 8 MiB chunks) on versitygw: wire bytes per rewritten byte against the part planner's bound
	NOVA_TEST_TIMEOUT=30m scripts/test.sh -run '^$$' -bench BenchmarkEraseOneRecordPerObject -benchtime 1x ./settle/

bench-verify: ## auditor verify on a star of 10^4 settled objects of 64 KiB, then 100 of 32 MiB (file store): objects per second and peak heap, read whole, in the default 4 MiB window and in 16 KiB windows
	NOVA_TEST_TIMEOUT=30m scripts/test.sh -run '^$$' -bench BenchmarkVerifyStar -benchtime 1x ./verify/
	NOVA_BENCH_VERIFY_OBJECTS=100 NOVA_BENCH_VERIFY_OBJECT_KIB=32768 NOVA_TEST_TIMEOUT=30m scripts/test.sh -run '^$$' -bench BenchmarkVerifyStar -benchtime 1x ./verify/

bench-settle: ## the settle beside a naive settle at equal concurrency (four shapes; readback and server-checked on versitygw), then 50 cycles of tail rewrites on both backends
	NOVA_TEST_TIMEOUT=60m scripts/test.sh -run '^$$' -bench 'BenchmarkSettleVsNaive' -benchtime 1x ./settle/
	NOVA_BENCH_TAIL_CYCLES=50 NOVA_TEST_TIMEOUT=60m scripts/test.sh -v -run '^TestTailRewriteCycles$$' ./settle/

bench-tail: ## the long-tail star (many trickle streams settling at the copy floor) on versitygw at 30 ms S3 latency: 10,000 Zipf-skewed streams, 50 rounds of write-then-cycle, per-round objects/s against a raw PUT loop, S3 requests, Postgres commits and CPU per object, bytes per new byte, transit and age (NOVA_BENCH_TAIL_STREAMS, _ROUNDS, _CONCURRENCY)
	NOVA_BENCH_TAIL=1 NOVA_TEST_TIMEOUT=0 scripts/test.sh -v -run '^TestLongTailStar$$' ./settle/

bench-fleet: ## idle fleets on the file store (200 stars on 2 members, 1,000 on 4): time to all led, stars per member, peak connections, commits and CPU per idle star-cycle, RSS per star, re-lead after SIGKILL (NOVA_BENCH_DATABASE_URL, NOVA_BENCH_FLEET_SHAPES, NOVA_BENCH_FLEET_LONG=1 for the 5-minute column)
	scripts/bench-fleet.sh

mixin: ## regenerate deploy/prometheus/alerts.yaml from the mixin (deploy/mixin: the template and the default _config); MIXIN_CONFIG=FILE MIXIN_OUT=FILE for your own
	$(GO) run ./deploy/mixin/gen $(if $(MIXIN_CONFIG),-config $(MIXIN_CONFIG)) -out $(or $(MIXIN_OUT),deploy/prometheus/alerts.yaml)

lint: ## gofmt, go vet, no issue numbers (repocheck TestNoIssueNumbers), and golangci-lint (.golangci.yml; the pinned version built into .bin the first time, about 3 minutes)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	@! git grep -nIiE 'issue ?#?[0-9]+' || { echo 'cite what it means, not an issue number'; exit 1; }
	$(GO) vet ./...
	scripts/tools.sh golangci-lint >/dev/null
	.bin/golangci-lint run

services-up: ## start versitygw (and Postgres if needed) and leave them running
	scripts/services.sh up

services-down: ## stop what services-up started
	scripts/services.sh down

clean: ## remove build output
	rm -rf $(BIN)
