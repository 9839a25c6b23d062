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

# tests/e2e/test_rehearsal.py runs the operator and trainer images on the cluster's real node. The images
# (hack/image.sh: the Docker daemon, stand-in bases, the three targets; cached by content) build in the
# background while the cluster's Go binaries compile: cold, one waits on downloads while the other uses the
# CPUs (docs/cluster.md, "Time"); warm, both are no-ops.
images_log=$(mktemp /tmp/rljob-images.XXXXXX.log)
hack/image.sh >"${images_log}" 2>&1 &
images_pid=$!
# The MaxText backend's venv (a full run only, see the end): also in the background from the start.
maxtext_log=$(mktemp /tmp/rljob-venv-maxtext.XXXXXX.log)
maxtext_rc=$(mktemp /tmp/rljob-venv-maxtext.XXXXXX.rc)  # its exit status, once it has one
maxtext_pid=
if [ $# -eq 0 ]; then
  (hack/venv-maxtext.sh >"${maxtext_log}" 2>&1; echo $? >"${maxtext_rc}") &
  maxtext_pid=$!
fi
trap 'kill ${images_pid} ${maxtext_pid} 2>/dev/null || true' EXIT

echo "== simulated cluster binaries"
hack/cluster/build.sh

echo "== images (built in the background since the start; log: ${images_log})"
if ! wait "${images_pid}"; then
  cat "${images_log}"
  echo "hack/image.sh failed" >&2
  exit 1
fi
cat "${images_log}"
export RLJOB_REQUIRE_IMAGES=1  # tests/images: a missing image fails, it does not skip

echo "== pytest"
# The e2e fixture starts the cluster (or attaches to a running one) and stops what it started.
if [ $# -gt 0 ]; then
  pytest "$@"
else
  # Two pytest processes: the cluster tiers (tests/e2e, tests/images: mostly waiting on controllers, the
  # kubelet and containers) in the background beside the CPU-bound rest; their output follows the rest's.
  # When they end (~17 min), the MaxText backend's tests (Python 3.12, their own venv made in the
  # background since the start; docs/maxtext.md) run in that same background slot (~3 min), then the
  # `late` files of the rest (~15 min beside it): the rest alone took ~43 min warm and left the second core
  # idle after the first ~20; so split (docs/cluster.md, "Time": session 35's rehearsal ended the rest at
  # 39:29 and the late files at ~34:30, so the decode tests joined them; session 37's: the rest 62:03, the
  # background slot ~43:50, so the sharded-run and GCS-resume trainers, ~6 min of subprocesses, joined too).
  late=(
    tests/trainer/test_packing_stream.py
    tests/trainer/test_packing_budget.py
    tests/trainer/test_unpacked_learner.py
    tests/trainer/test_checkpoint_resume.py
    tests/trainer/test_packing_remat.py
    tests/trainer/test_decode.py
    tests/trainer/test_decode_attention.py
    tests/trainer/test_tpu_shardings.py
    tests/trainer/test_gcs_resume.py
  )
  cluster_log=$(mktemp /tmp/rljob-pytest-cluster.XXXXXX.log)
  (
    rc=0
    pytest -p no:cacheprovider --durations=15 tests/e2e tests/images || rc=$?
    echo "== MaxText backend (.venv-maxtext, Python 3.12; its venv made in the background since the start)"
    until [ -s "${maxtext_rc}" ]; do sleep 2; done
    cat "${maxtext_log}"
    if [ "$(cat "${maxtext_rc}")" != 0 ]; then
      echo "hack/venv-maxtext.sh failed" >&2
      exit 1
    fi
    .venv-maxtext/bin/pytest tests/maxtext_backend || rc=$?
    echo "== the rest's late files, beside the rest"
    pytest -p no:cacheprovider --durations=15 "${late[@]}" || rc=$?
    exit "${rc}"
  ) >"${cluster_log}" 2>&1 &
  cluster_pid=$!
  trap 'kill ${images_pid} ${maxtext_pid} ${cluster_pid} 2>/dev/null || true' EXIT
  rest_rc=0
  pytest --durations=100 --ignore=tests/e2e --ignore=tests/images "${late[@]/#/--ignore=}" || rest_rc=$?
  cluster_rc=0
  wait "${cluster_pid}" || cluster_rc=$?
  echo "== pytest tests/e2e tests/images, then tests/maxtext_backend and the late files (ran beside the rest; exit ${cluster_rc})"
  cat "${cluster_log}"
  if [ "${rest_rc}" -ne 0 ] || [ "${cluster_rc}" -ne 0 ]; then
    echo "pytest failed: rest exit ${rest_rc}, cluster, MaxText and late tiers exit ${cluster_rc}" >&2
    exit 1
  fi
fi

