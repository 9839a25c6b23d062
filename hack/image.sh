#!/usr/bin/env bash
# Build the project's images from the real Dockerfile on this machine, where no image registry is reachable:
#   1. a Docker daemon: the one running, else Debian's docker.io (installed with apt when missing), started in
#      the background and left running (log: $CACHE/dockerd.log; stop it with `kill $(cat /var/run/docker.pid)`);
#   2. stand-in base images tagged python:3.11-slim-bookworm and python:3.12-slim-bookworm (the Dockerfile's
#      FROM names) from a `debootstrap --variant=minbase bookworm` of the apt mirror this machine uses
#      (hack/images/python-standin.Dockerfile; how they differ from the real ones: docs/install.md). A real
#      python:* image already present (one without the stand-in label) is used as it is;
#   3. the targets, tagged localhost/rljob-<target>:dev.
# Every step is cached by content: a label on each image records the hash of what it was built from (the
# build context Docker sends, after .dockerignore; the Dockerfile; the build arguments; the base image's ID),
# and a step whose image already carries that hash is skipped. A warm run takes seconds.
#
# Usage: hack/image.sh [--save DIR] [TARGET...]     (targets: operator trainer trainer-maxtext; default: all)
#   --save DIR   also `docker save` each image to DIR/rljob-<target>.tar (skipped when DIR/rljob-<target>.id
#                already names the image's ID), e.g. for `ctr -n k8s.io images import`.
# Env:
#   JAX_VARIANT          trainer images: tpu (default: jax[tpu], what GKE runs; JAX_PLATFORMS=cpu runs it on
#                        CPU) or cpu
#   RLJOB_IMAGE_CACHE    debootstrap results and logs (default: ~/.cache/rljob/images)
#   RLJOB_IMAGE_PREFIX   image names (default: localhost/rljob-), RLJOB_IMAGE_TAG (default: dev)
#   RLJOB_DEBIAN_MIRROR  apt mirror for debootstrap (default: the first bookworm source of this machine's apt)
#   RLJOB_PYTHON312      a CPython 3.12 for the 3.12 stand-in (default: python3.12 on PATH, else pyenv's)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CACHE=${RLJOB_IMAGE_CACHE:-$HOME/.cache/rljob/images}
PREFIX=${RLJOB_IMAGE_PREFIX:-localhost/rljob-}
TAG=${RLJOB_IMAGE_TAG:-dev}
JAX_VARIANT=${JAX_VARIANT:-tpu}
SUITE=bookworm
STANDIN_DEBIAN=localhost/rljob-standin-debian:${SUITE}
STANDIN_DOCKERFILE=hack/images/python-standin.Dockerfile
LABEL=org.rljob.build-hash
STANDIN_LABEL=org.rljob.standin
# Debian's client: BuildKit is built in (DOCKER_BUILDKIT=1). A static client without the buildx plugin
# (e.g. /usr/local/bin/docker on the dev machines) cannot build with BuildKit.
DOCKER=${DOCKER:-/usr/bin/docker}
export DOCKER_BUILDKIT=1

log() { echo "image.sh: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }
usage() { echo "usage: $0 [--save DIR] [operator|trainer|trainer-maxtext ...]" >&2; exit 2; }

save_dir=""
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --save) [[ $# -ge 2 ]] || usage; save_dir=$2; shift 2 ;;
    operator | trainer | trainer-maxtext) targets+=("$1"); shift ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=(operator trainer trainer-maxtext)
[[ "${JAX_VARIANT}" == tpu || "${JAX_VARIANT}" == cpu ]] || { log "JAX_VARIANT must be tpu or cpu"; exit 2; }
mkdir -p "${CACHE}"

apt_install() {
  log "installing Debian packages: $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
}

sha() { sha256sum | cut -c1-16; }
label_of() { "${DOCKER}" image inspect -f "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true; }
image_id() { "${DOCKER}" image inspect -f '{{.Id}}' "$1"; }

# --- 1. the daemon ---------------------------------------------------------------------------------------
ensure_docker() {
  if [[ ! -x "${DOCKER}" || ! -x /usr/sbin/dockerd ]]; then
    apt_install docker.io
  fi
  if "${DOCKER}" info >/dev/null 2>&1; then
    return 0
  fi
  log "starting dockerd (log: ${CACHE}/dockerd.log)"
  # setsid: the daemon outlives this script (the tests and the cluster's node use the images it holds).
  setsid /usr/sbin/dockerd >>"${CACHE}/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 60); do
    "${DOCKER}" info >/dev/null 2>&1 && return 0
    sleep 1
  done
  tail -n 20 "${CACHE}/dockerd.log" >&2
  die "dockerd did not answer within 60 s"
}

# --- 2. the stand-in bases -------------------------------------------------------------------------------
# apt_mirror SUITE -> the first URI this machine's apt sources list for SUITE (deb822 or one-line format).
apt_mirror() {
  local suite=$1
  python3 - "${suite}" <<'EOF'
import glob
import re
import sys

suite = sys.argv[1]
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]:
    try:
        text = open(path).read()
    except OSError:
        continue
    for line in text.splitlines():  # one-line format: deb [opts] URI SUITE COMPONENTS...
        m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
        if m and m.group(2) == suite:
            print(m.group(1))
            sys.exit(0)
    for stanza in re.split(r"\n\s*\n", text):  # deb822 format
        fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
        if "deb" in fields.get("Types", "").split() and suite in fields.get("Suites", "").split():
            print(fields["URIs"].split()[0])
            sys.exit(0)
sys.exit(1)
EOF
}

python312() {
  local candidate
  for candidate in "${RLJOB_PYTHON312:-}" "$(command -v python3.12 || true)" \
    "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12; do
    if [[ -n "${candidate}" && -x "${candidate}" ]] && "${candidate}" -c '' 2>/dev/null; then
      echo "${candidate}"
      return 0
    fi
  done
  die "no CPython 3.12 for the python:3.12 stand-in (set RLJOB_PYTHON312)"
}

ensure_debian_rootfs() {
  local mirror key rootfs_tar tmp
  mirror=${RLJOB_DEBIAN_MIRROR:-$(apt_mirror "${SUITE}" || echo http://deb.debian.org/debian)}
  key=$(echo "debootstrap --variant=minbase ${SUITE} ${mirror}" | sha)
  if [[ "$(label_of "${STANDIN_DEBIAN}" "${LABEL}")" == "${key}" ]]; then
    return 0
  fi
  rootfs_tar="${CACHE}/debian-${SUITE}-minbase-${key}.tar"
  if [[ ! -f "${rootfs_tar}" ]]; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    tmp=$(mktemp -d "${CACHE}/rootfs.XXXXXX")
    log "debootstrap --variant=minbase ${SUITE} from ${mirror} (about a minute; log: ${CACHE}/debootstrap.log)"
    debootstrap --variant=minbase "${SUITE}" "${tmp}" "${mirror}" >"${CACHE}/debootstrap.log" 2>&1 ||
      { tail -n 20 "${CACHE}/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "${tmp}"/var/cache/apt/archives/*.deb "${tmp}"/var/lib/apt/lists/*
    tar -C "${tmp}" --numeric-owner -cf "${rootfs_tar}.part" .
    mv "${rootfs_tar}.part" "${rootfs_tar}"
    rm -rf "${tmp}"
  fi
  log "docker import ${rootfs_tar} -> ${STANDIN_DEBIAN}"
  "${DOCKER}" import --change "LABEL ${LABEL}=${key} ${STANDIN_LABEL}=1" "${rootfs_tar}" "${STANDIN_DEBIAN}" >/dev/null
}

# standin_base VERSION -> python:VERSION-slim-bookworm, unless a real image of that name is present.
standin_base() {
  local version=$1 name="python:$1-slim-${SUITE}" ctx key py=""
  if "${DOCKER}" image inspect "${name}" >/dev/null 2>&1 && [[ -z "$(label_of "${name}" "${STANDIN_LABEL}")" ]]; then
    log "${name}: a real image is present, used as it is"
    return 0
  fi
  ctx="${CACHE}/standin-context-${version}"
  rm -rf "${ctx}" && mkdir -p "${ctx}"
  cp /etc/ssl/certs/ca-certificates.crt "${ctx}/ca-certificates.crt"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"${ctx}/pip.conf"
  local mirror security
  mirror=${RLJOB_DEBIAN_MIRROR:-$(apt_mirror "${SUITE}" || echo http://deb.debian.org/debian)}
  security=$(apt_mirror "${SUITE}-security" || echo http://deb.debian.org/debian-security)
  printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "${mirror}" "${SUITE}" "${SUITE}" "${security}" "${SUITE}" >"${ctx}/debian.sources"
  if [[ "${version}" == 3.12 ]]; then
    py=$(python312)
    # The interpreter, its shared library, stdlib and headers: no site-packages (pip comes from ensurepip in
    # the venv the Dockerfile makes), no test suite, no scripts with this machine's paths in their shebangs.
    local prefix
    prefix=$("${py}" -c 'import sys; print(sys.base_prefix)')
    mkdir -p "${ctx}/python/bin" "${ctx}/python/lib"
    cp -a "${prefix}/bin/python3.12" "${ctx}/python/bin/"
    cp -a "${prefix}"/lib/libpython3.12.so* "${ctx}/python/lib/"
    cp -a "${prefix}/include" "${ctx}/python/"
    tar -C "${prefix}/lib" --exclude='python3.12/site-packages/*' --exclude='python3.12/test' \
      --exclude='__pycache__' -cf - python3.12 | tar -C "${ctx}/python/lib" -xf -
  fi
  key=$( (cat "${STANDIN_DOCKERFILE}" "${ctx}/ca-certificates.crt" "${ctx}/pip.conf" "${ctx}/debian.sources"
    image_id "${STANDIN_DEBIAN}"
    [[ -z "${py}" ]] || "${py}" -c 'import sys; print(sys.version, sys.base_prefix)') | sha)
  if [[ "$(label_of "${name}" "${LABEL}")" == "${key}" ]]; then
    return 0
  fi
  log "building stand-in ${name} (log: ${CACHE}/standin-${version}.log)"
  "${DOCKER}" build --target "py${version//./}" --build-arg "BASE=${STANDIN_DEBIAN}" \
    --label "${LABEL}=${key}" --label "${STANDIN_LABEL}=1" -t "${name}" \
    -f "${ROOT}/${STANDIN_DOCKERFILE}" "${ctx}" >"${CACHE}/standin-${version}.log" 2>&1 ||
    { tail -n 30 "${CACHE}/standin-${version}.log" >&2; die "stand-in ${name} did not build"; }
}

# --- 3. the targets --------------------------------------------------------------------------------------
# context_hash -> a hash of the build context exactly as Docker sends it (.dockerignore applied by Docker
# itself: a scratch stage copying the whole context, exported to a folder): paths, modes and contents.
context_hash() {
  local out
  out=$(mktemp -d "${CACHE}/context.XXXXXX")
  printf 'FROM scratch\nCOPY . /\n' | "${DOCKER}" build -q -o "type=local,dest=${out}" -f - . >/dev/null
  (cd "${out}" && find . -type f -printf '%m %p\n' | LC_ALL=C sort && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) | sha
  rm -rf "${out}"
}

base_of() {
  case "$1" in
    trainer-maxtext) echo "python:3.12-slim-${SUITE}" ;;
    *) echo "python:3.11-slim-${SUITE}" ;;
  esac
}

build_target() {
  local target=$1 ctx_hash=$2 name="${PREFIX}$1:${TAG}" key log_file started
  key=$( (echo "${target} JAX_VARIANT=${JAX_VARIANT} ${ctx_hash}"; cat Dockerfile; image_id "$(base_of "${target}")") | sha)
  if [[ "$(label_of "${name}" "${LABEL}")" == "${key}" ]]; then
    log "${name}: up to date (${LABEL}=${key})"
    return 0
  fi
  log_file="${CACHE}/build-${target}.log"
  log "building ${name} (--target ${target}, JAX_VARIANT=${JAX_VARIANT}; log: ${log_file})"
  started=${SECONDS}
  "${DOCKER}" build --progress=plain --target "${target}" --build-arg "JAX_VARIANT=${JAX_VARIANT}" \
    --label "${LABEL}=${key}" -t "${name}" . >"${log_file}" 2>&1 ||
    { tail -n 40 "${log_file}" >&2; die "${name} did not build"; }
  log "${name}: built in $((SECONDS - started)) s"
}

save_image() {
  local target=$1 name="${PREFIX}$1:${TAG}" id
  id=$(image_id "${name}")
  mkdir -p "${save_dir}"
  if [[ -f "${save_dir}/rljob-${target}.tar" && "$(cat "${save_dir}/rljob-${target}.id" 2>/dev/null)" == "${id}" ]]; then
    return 0
  fi
  log "docker save ${name} -> ${save_dir}/rljob-${target}.tar"
  "${DOCKER}" save -o "${save_dir}/rljob-${target}.tar.part" "${name}"
  mv "${save_dir}/rljob-${target}.tar.part" "${save_dir}/rljob-${target}.tar"
  echo "${id}" >"${save_dir}/rljob-${target}.id"
}

started=${SECONDS}
ensure_docker
ensure_debian_rootfs
needed=()
for t in "${targets[@]}"; do needed+=("$(base_of "${t}")"); done
for base in $(printf '%s\n' "${needed[@]}" | sort -u); do
  version=${base#python:}
  standin_base "${version%%-*}"
done
ctx_hash=$(context_hash)
for t in "${targets[@]}"; do
  build_target "${t}" "${ctx_hash}"
  [[ -z "${save_dir}" ]] || save_image "${t}"
done
for t in "${targets[@]}"; do
  echo "${PREFIX}${t}:${TAG} $(image_id "${PREFIX}${t}:${TAG}")"
done
log "done in $((SECONDS - started)) s"
