#!/usr/bin/env bash
# The whole test suite, from a fresh machine: venv, lint, generated-file drift, the simulated cluster
# (built from Go modules and cached), the images (hack/image.sh, cached), then pytest over every tier.
# `make test` and CI (.ci/run) call this.
set -euo pipefail
cd "$(dirname "$0")/.."

hack/venv.sh
export PATH="$PWD/.venv/bin:$PATH" JAX_PLATFORMS=cpu

echo "== lint"
ruff check .
ruff format --check .

echo "== simulated cluster binaries"
hack/cluster/build.sh

echo "== images (hack/image.sh: the Docker daemon, stand-in bases, the three targets; cached by content)"
# tests/e2e/test_rehearsal.py runs the operator and trainer images on the cluster's real node.
hack/image.sh
export RLJOB_REQUIRE_IMAGES=1  # tests/images: a missing image fails, it does not skip

echo "== pytest"
# The e2e fixture starts the cluster (or attaches to a running one) and stops what it started.
pytest "$@"

# The MaxText backend's tests need Python 3.12 and MaxText (docs/maxtext.md): their own venv, cached like
# .venv (cold 1.5-2 min on the shared 2-core machine, then a no-op; the tests add 10-25 min by load: figures
# in docs/maxtext.md). Only on a full run: pytest arguments select Tunix-env tests.
if [ $# -eq 0 ]; then
  echo "== MaxText backend (.venv-maxtext, Python 3.12)"
  hack/venv-maxtext.sh
  .venv-maxtext/bin/pytest tests/maxtext_backend
fi
