#!/usr/bin/env bash
# Run the TPU tier (tests/tpu) on the project's offline chip host, from the project root of a copy of the
# checkout that carries .tpu/ (../shared/tpu/bundle.sh made it; docs/tpu.md, "Running the tier").
#   hack/tpu/tier.sh OUT [pytest args...]     e.g. hack/tpu/tier.sh "$OUT" -k "not qwen3"
# Writes OUT/tier/*.json (each test's record), OUT/pytest.log and OUT/host.json (date, chip, versions).
# RLJOB_TIER_TIMEOUT=SECONDS bounds pytest itself (as RLJOB_BENCH_TIMEOUT in bench.sh: a `timeout` around this
# script stops the shell and can leave a process holding the chip for the next command).
set -uo pipefail
out=${1:?usage: hack/tpu/tier.sh OUT [pytest args...]}
shift
mkdir -p "$out/tier"
# shellcheck disable=SC1091
. .tpu/setup.sh >"$out/setup.log" 2>&1
export RLJOB_NO_SOCKETS=1 RLJOB_TPU_OUT="$out/tier"
python3 - >"$out/host.json" 2>>"$out/setup.log" <<'PY'
import datetime, json, os, platform
from tests.tpu.chip import versions
print(json.dumps({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "commit": os.environ.get("RLJOB_COMMIT", "?"), "python": platform.python_version(),
                  "cpus": os.cpu_count(), "versions": versions()}))
PY
start=$(date +%s)
timeout -k 10 "${RLJOB_TIER_TIMEOUT:-0}" python3 -m pytest -p no:cacheprovider -v --durations=0 tests/tpu "$@" >"$out/pytest.log" 2>&1
rc=$?
echo "tier exit $rc in $(( $(date +%s) - start )) s" | tee -a "$out/pytest.log"
tail -n 30 "$out/pytest.log"
exit $rc
