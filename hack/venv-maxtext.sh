#!/usr/bin/env bash
# The MaxText backend's environment (.venv-maxtext): Python 3.12 (MaxText requires >= 3.12) with the
# `maxtext` and `dev` extras, pinned by hack/maxtext-constraints.txt (the list the MaxText image installs too).
# Cached like .venv (stamp of pyproject.toml + extras + constraints): a no-op when current.
# Cold: 41 s from an empty uv cache (1.7 GB of wheels), 23 s with a warm one (2026-12-02, this machine); see
# docs/maxtext.md. uv cannot download interpreters here, so it uses an installed 3.12: $RLJOB_PYTHON312,
# else python3.12 on PATH, else pyenv's.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python312() {
  local candidate
  for candidate in "${RLJOB_PYTHON312:-}" "$(command -v python3.12 || true)" \
    "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "hack/venv-maxtext.sh: no Python 3.12 interpreter found (set RLJOB_PYTHON312)" >&2
  return 1
}

RLJOB_VENV=.venv-maxtext RLJOB_EXTRAS=maxtext,dev RLJOB_CONSTRAINTS=hack/maxtext-constraints.txt \
  RLJOB_PYTHON="$(find_python312)" exec hack/venv.sh
