"""MaxText backend tests. They run in the Python 3.12 environment (``hack/venv-maxtext.sh``;
``hack/test.sh`` runs them with ``.venv-maxtext/bin/pytest tests/maxtext_backend``). In the Tunix environment
(Python 3.11, no MaxText) they are not collected; there pytest only sees the rest of the suite. Told apart by
the interpreter, not by whether MaxText imports: in the 3.12 environment a missing MaxText is a failure."""

from __future__ import annotations

import sys

import pytest

collect_ignore_glob = [] if sys.version_info >= (3, 12) else ["test_*.py"]


@pytest.fixture(scope="session")
def tiny():
    """A tiny random MaxText qwen3 decoder behind MaxText's Tunix adapter, with its mesh."""
    from rljob_trainer.models.maxtext.testing import tiny_maxtext_model

    return tiny_maxtext_model(seed=3)
