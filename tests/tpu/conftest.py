"""The TPU tier: what only the chip can show, skipped wherever no TPU is present (CI, every CPU machine).

Runs on a TPU VM (docs/tpu.md says how: ``. .tpu/setup.sh`` on the project's offline chip host, then
``pytest tests/tpu``). Every test runs its JAX work in subprocesses: only one program can hold the chip,
so this pytest process never opens it (no JAX backend here). Presence is told without opening it: a TPU
device node (``/dev/accel*`` or ``/dev/vfio/<n>``) and libtpu installed, and ``JAX_PLATFORMS`` not set to
another platform (``make test`` sets ``cpu``).

``RLJOB_TPU_OUT``: a folder each test writes its record into (JSON), for docs/tpu.md and
bench/results/tpu.json. ``RLJOB_TPU_TIER=force`` runs the tier without a TPU (its children then run on
the CPU): a dry run of the scripts before spending chip time.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

import pytest


def tpu_present() -> bool:
    if os.environ.get("RLJOB_TPU_TIER") == "force":
        return True
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms and "tpu" not in platforms.split(","):
        return False
    nodes = glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")
    return bool(nodes) and importlib.util.find_spec("libtpu") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    skip = None if tpu_present() else pytest.mark.skip(reason="no TPU here (the TPU tier runs on a chip)")
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.tpu)
            if skip is not None:
                item.add_marker(skip)


@pytest.fixture
def record(request: pytest.FixtureRequest):
    """``record(name, doc)``: writes ``doc`` as ``$RLJOB_TPU_OUT/<name>.json`` (when set)."""
    import json

    def write(name: str, doc: dict) -> None:
        out = os.environ.get("RLJOB_TPU_OUT")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / f"{name}.json").write_text(json.dumps(doc, indent=1))

    return write
