# Thin targets over scripts/. `make help` lists them.
.DEFAULT_GOAL := help
SHELL := /usr/bin/env bash
# (Both the Debian docker-compose v1 and the docker compose plugin v2 work:
# scripts/lib.sh's compose picks the one installed.)

.PHONY: help
help: ## Lists the targets.
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{n[NR] = $$1; d[NR] = $$2; if (length($$1) > w) w = length($$1)} END {for (i = 1; i <= NR; i++) printf "  %-" w "s  %s\n", n[i], d[i]}'

.PHONY: build
build: ## Builds every binary statically into bin/.
	@scripts/build.sh

.PHONY: generate
generate: ## Regenerates the protobuf Go code from scratch with pinned tools.
	@scripts/generate.sh

.PHONY: verify
verify: ## Fails on stale generated code, untidy go.mod, buf lint, vet, staticcheck, gofmt, docs naming a commit the history lacks.
	@scripts/verify.sh

.PHONY: test
test: verify ## Runs make verify, then every module's tests under -race, then test-etcd-compat and test-monitoring's promtool checks.
	@scripts/test.sh

.PHONY: test-etcd-compat
test-etcd-compat: ## The observer's tests against etcd v3.5 and v3.7 (pinned in test/etcdcompat).
	@scripts/etcd-compat.sh

.PHONY: test-monitoring
test-monitoring: ## Checks deploy/monitoring: promtool check rules and test rules (promtool pinned), then the rules' and the dashboard's metrics against a running stack.
	@scripts/monitoring.sh

.PHONY: test-robustness
test-robustness: ## The replicated queue's robustness suite: three members, clients and seeded faults, a power loss of all three, checked with porcupine (ROBUSTNESS_DURATION=30m for a long run, ROBUSTNESS_SEED=N to replay).
	@scripts/robustness.sh

.PHONY: test-fresh-seeds
test-fresh-seeds: ## The randomised suites (workqueue model, replicated broker, robustness mix, power loss) with fresh seeds; make test runs them pinned.
	@scripts/fresh-seeds.sh

.PHONY: test-k8s
test-k8s: ## Applies deploy/kubernetes/ server-side to a kube-apiserver and kube-controller-manager built from k8s.io/kubernetes (pinned in test/k8s).
	@scripts/test-k8s.sh

.PHONY: bench
bench: build ## Runs the benchmarks and writes docs/benchmarks.md.
	@scripts/bench.sh

.PHONY: run
run: ## Builds bin/baton-dev, bin/batonctl and bin/baton-experiment, then starts the embedded stack (etcd in-process + every service, the experiments' rules loaded); TLS=1 for mutual TLS everywhere; ARGS go to baton-dev.
	@scripts/build.sh baton-dev batonctl baton-experiment && TLS="$(TLS)" scripts/run.sh $(ARGS)

.PHONY: etcdctl
etcdctl: ## Builds bin/etcdctl from the etcd module deploy/etcd pins (for objects of your own kinds).
	@cd deploy/etcd && GOWORK=off CGO_ENABLED=0 go build -trimpath -o ../../bin/etcdctl go.etcd.io/etcd/etcdctl/v3

.PHONY: up
up: ## docker compose up -d --build, plus what this machine lacks; waits until healthy.
	@scripts/up.sh

.PHONY: up-ha
up-ha: ## make up with the replicated queue: three members (docker-compose.ha.yml).
	@COMPOSE_FILE=docker-compose.yml:docker-compose.ha.yml scripts/up.sh

.PHONY: down
down: ## Stops the compose stack (make up's or make up-ha's) and removes its volumes (keeps the baton/* images).
	@source scripts/lib.sh && COMPOSE_FILE=docker-compose.yml:docker-compose.ha.yml compose down -v --remove-orphans

.PHONY: test-e2e
test-e2e: ## End-to-end test of the compose stack (skipped without Docker).
	@scripts/e2e.sh

.PHONY: clean
clean: ## Removes built binaries and installed tools.
	rm -rf bin .tools
