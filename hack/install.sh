#!/usr/bin/env bash
# Install rljob into a Python environment in two steps. The Dockerfile's RUN lines call exactly this
# script, and hack/check_dockerfile.sh runs it in a fresh venv, so the image build is tested without
# a Docker engine.
#
#   hack/install.sh deps operator|trainer|maxtext
#                                           third-party dependencies only. Reads nothing but
#                                           pyproject.toml (and, for maxtext, the pins in
#                                           hack/maxtext-constraints.txt, the list .venv-maxtext is
#                                           built from too), so the image layer with them survives
#                                           source edits.
#   hack/install.sh project                 the rljob package itself (no dependencies), from the
#                                           source in the current directory; then `pip check`.
#
# Environment:
#   PYTHON       interpreter whose environment receives the packages (default: python)
#   JAX_VARIANT  trainer and maxtext: tpu (jax[tpu], pulls libtpu; default) or cpu (plain jax, for CI
#                machines without TPUs)
#   WITH_VLLM    trainer only: 1 adds the vLLM TPU rollout backend (vllm-tpu + tpu-inference 0.25.0, the
#                newest pair that resolves with jax 0.10.2 on Python 3.11). Every tpu-inference release
#                pins qwix==0.1.2 while google-tunix 0.1.7 asks for qwix>=0.1.6 (used only by Tunix's own
#                LoRA CLI, never by rljob), which pip cannot reconcile: this step installs with uv and
#                the override qwix==0.1.2 (docs/trainer.md, "The TPU image").
set -euo pipefail

PYTHON=${PYTHON:-python}
JAX_VARIANT=${JAX_VARIANT:-tpu}
WITH_VLLM=${WITH_VLLM:-0}
VLLM_TPU_REQUIREMENTS=("vllm-tpu==0.25.0" "tpu-inference==0.25.0")
VLLM_TPU_OVERRIDE="qwix==0.1.2"
MAXTEXT_CONSTRAINTS=hack/maxtext-constraints.txt

usage() {
  echo "usage: $0 deps operator|trainer|maxtext | $0 project" >&2
  exit 2
}

pip_install() {
  "${PYTHON}" -m pip install --disable-pip-version-check --no-input "$@"
}

# requirements EXTRA -> the project's dependencies plus those of EXTRA, one per line, from pyproject.toml.
# For the TPU trainers, jax becomes jax[tpu] at the same pin (the extra adds the matching libtpu wheel).
requirements() {
  "${PYTHON}" - "$1" "${JAX_VARIANT}" <<'EOF'
import re
import sys
import tomllib

extra, jax_variant = sys.argv[1], sys.argv[2]
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
extras = project.get("optional-dependencies", {})
if extra not in extras:
    sys.exit(f"pyproject.toml has no extra {extra!r} (have: {', '.join(sorted(extras))})")
reqs = [*project.get("dependencies", []), *extras[extra]]
if extra in ("trainer", "maxtext") and jax_variant == "tpu":
    pinned = [r for r in reqs if re.match(r"jax\s*[=<>!~]", r)]
    if len(pinned) != 1:
        sys.exit(f"expected one pinned jax requirement in the {extra} extra, found {pinned}")
    reqs.append(re.sub(r"^jax", "jax[tpu]", pinned[0]))
elif jax_variant not in ("tpu", "cpu"):
    sys.exit(f"JAX_VARIANT must be tpu or cpu, not {jax_variant!r}")
print("\n".join(reqs))
EOF
}

[[ $# -ge 1 ]] || usage
case "$1" in
  deps)
    [[ $# -eq 2 && ( "$2" == operator || "$2" == trainer || "$2" == maxtext ) ]] || usage
    mapfile -t reqs < <(requirements "$2")
    [[ ${#reqs[@]} -gt 0 ]] || { echo "no requirements found for $2" >&2; exit 1; }
    echo "install.sh: $2 dependencies (jax: ${JAX_VARIANT}, vllm: ${WITH_VLLM}): ${reqs[*]}" >&2
    if [[ "$2" == trainer && "${WITH_VLLM}" == 1 ]]; then
      reqs+=("${VLLM_TPU_REQUIREMENTS[@]}")
      pip_install "uv>=0.5"
      "${PYTHON}" -m uv pip install --python "${PYTHON}" --override <(echo "${VLLM_TPU_OVERRIDE}") \
        "setuptools>=69" "${reqs[@]}"
      exit 0
    fi
    # The MaxText environment is pinned package by package (Python 3.12; the same pins as .venv-maxtext).
    constraints=()
    [[ "$2" != maxtext ]] || constraints=(--constraint "${MAXTEXT_CONSTRAINTS}")
    # setuptools is the build backend of `install.sh project`; installed here so that step needs no
    # network for the build and the project step can use --no-build-isolation.
    pip_install "${constraints[@]}" "setuptools>=69" "${reqs[@]}"
    ;;
  project)
    [[ $# -eq 1 ]] || usage
    [[ -f pyproject.toml ]] || { echo "run from the source root (no pyproject.toml here)" >&2; exit 1; }
    pip_install --no-deps --no-build-isolation .
    # Every dependency of what was installed must already be there (the deps step installed them). The one
    # mismatch allowed is the vLLM image's override (deps step, WITH_VLLM=1): qwix 0.1.2 under Tunix.
    if ! report=$("${PYTHON}" -m pip check); then
      unexpected=$(grep -v "has requirement qwix>=.*but you have qwix ${VLLM_TPU_OVERRIDE#qwix==}" <<<"${report}" || true)
      if [[ -n "${unexpected}" ]]; then
        echo "${report}" >&2
        exit 1
      fi
    fi
    ;;
  *) usage ;;
esac
