"""Fixtures shared by the trainer tests: ``gcs``, a real GCS-compatible server (tests/trainer/gcs.py)."""

from tests.trainer.gcs import gcs  # noqa: F401  (re-exported as a fixture)
