""".venv-maxtext holds exactly the versions hack/maxtext-constraints.txt pins, the list the MaxText trainer
image installs too (``hack/install.sh deps maxtext``): what these tests run against is what the image runs.
libtpu is pinned for the TPU image only (jax[tpu]); nothing else may be missing or differ."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TPU_ONLY = {"libtpu"}


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_venv_matches_the_image_pins() -> None:
    pins = {}
    for line in (ROOT / "hack" / "maxtext-constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[normal(name)] = version.strip()
    installed = {normal(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wrong = {
        name: (version, installed.get(name))
        for name, version in pins.items()
        if name not in TPU_ONLY and installed.get(name) != version
    }
    assert wrong == {}, "pinned vs installed"
    assert len(pins) > 100  # the whole environment, not a few top-level packages
