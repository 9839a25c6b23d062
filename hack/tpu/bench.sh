#!/usr/bin/env bash
# Run one arm of the TPU benchmark (bench/tpu.py) on the project's offline chip host, from the project root
# of a copy of the checkout that carries .tpu/ (docs/tpu.md, "Running the tier").
#   hack/tpu/bench.sh OUT ARM [bench/tpu.py args...]     e.g. hack/tpu/bench.sh "$OUT" packed --steps 3
# RLJOB_BENCH_TIMEOUT=SECONDS bounds the run itself: a `timeout` around this script would stop the shell and
# leave python holding the chip, so the next program fails on libtpu's lock file.
# Writes OUT/ARM.json (the figures) and OUT/ARM.log (the trainer's console and the bench's output).
set -uo pipefail
out=${1:?usage: hack/tpu/bench.sh OUT ARM [args...]}
arm=${2:?usage: hack/tpu/bench.sh OUT ARM [args...]}
shift 2
mkdir -p "$out"
# shellcheck disable=SC1091
. .tpu/setup.sh >"$out/setup.log" 2>&1
export RLJOB_NO_SOCKETS=1 TPU_WORKER_HOSTNAMES=localhost RLJOB_COMMIT="${RLJOB_COMMIT:-?}"
start=$(date +%s)
timeout -k 10 "${RLJOB_BENCH_TIMEOUT:-0}" python3 bench/tpu.py --arm "$arm" --out "$out/$arm.json" "$@" >"$out/$arm.log" 2>&1
rc=$?
echo "bench $arm exit $rc in $(( $(date +%s) - start )) s" | tee -a "$out/$arm.log"
grep -E "^step | phase |token budget|rollout: |packing: at most|unpacked: at most|prewarm|^programs step|Error|error:" "$out/$arm.log" | tail -n 30
exit $rc
