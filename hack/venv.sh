#!/usr/bin/env bash
# Create or refresh the project's virtual environment (.venv) with every extra the demo and tests need.
# Idempotent and fast when nothing changed: a stamp file records the pyproject.toml it was built from.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${RLJOB_VENV:-.venv}
EXTRAS=${RLJOB_EXTRAS:-operator,trainer,dev}
PYTHON=${RLJOB_PYTHON:-3.11}  # a version or an interpreter path (hack/venv-maxtext.sh passes 3.12's)
CONSTRAINTS=${RLJOB_CONSTRAINTS:-}  # a pinned constraints file (hack/venv-maxtext.sh: the MaxText image's)
stamp="$VENV/.rljob-stamp"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $EXTRAS"
constraint_args=()
if [ -n "$CONSTRAINTS" ]; then
  want="$want $(sha256sum "$CONSTRAINTS" | cut -d' ' -f1)"
  constraint_args=(-c "$CONSTRAINTS")
fi

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

# uv resolves and installs Tunix + JAX in about a minute; plain pip takes several.
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check uv
fi
[ -x "$VENV/bin/python" ] || uv venv --quiet --python "$PYTHON" "$VENV"
VIRTUAL_ENV="$VENV" uv pip install --quiet "${constraint_args[@]}" -e ".[$EXTRAS]"
echo "$want" >"$stamp"
echo "venv ready: $VENV ($EXTRAS)"
