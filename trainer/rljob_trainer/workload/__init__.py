"""The workload: what the run trains on and how it is scored.

Here: model, tokenizer and dataset sources (``sources``: local, ``gs://``, ``hf://`` -> local files), the
prompts (``data``), the reward functions (``rewards``) and their math-verify worker process
(``math_worker``), and the built-in tiny task's tokenizer (``task``).

The bottom layer: plain Python and the RLJob API (``rljob.api``); it imports no other room of the trainer,
nor ``tunix_bridge`` (tests/trainer/test_layers.py).
"""
