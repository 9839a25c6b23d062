"""Exact, GRPO-preserving, fast sequence packing for Tunix (see docs/packing.md).

Interface for the trainer is documented here once the learner lands.
"""
