"""MaxText backend tests. They run in the Python 3.12 environment (``hack/venv-maxtext.sh``;
``hack/test.sh`` runs them with ``.venv-maxtext/bin/pytest tests/maxtext_backend``). In the Tunix environment
(Python 3.11, no MaxText) they are not collected; there pytest only sees the rest of the suite."""

from __future__ import annotations

import importlib.util

import pytest

collect_ignore_glob = [] if importlib.util.find_spec("maxtext") else ["test_*.py"]


@pytest.fixture(scope="session")
def tiny():
    """A tiny random MaxText qwen3 decoder behind MaxText's Tunix adapter, with its mesh."""
    from rljob_trainer.maxtext_testing import tiny_maxtext_model

    return tiny_maxtext_model(seed=3)
