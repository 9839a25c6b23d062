#!/usr/bin/env bash
# The whole test suite, from a fresh machine: venv, lint, generated-file drift, the simulated cluster
# (built from Go modules and cached), then pytest over every tier. `make test` and CI (.ci/run) call this.
set -euo pipefail
cd "$(dirname "$0")/.."

hack/venv.sh
export PATH="$PWD/.venv/bin:$PATH" JAX_PLATFORMS=cpu

echo "== lint"
ruff check .
ruff format --check .

echo "== simulated cluster binaries"
hack/cluster/build.sh

echo "== pytest"
# The e2e fixture starts the cluster (or attaches to a running one) and stops what it started.
pytest "$@"
