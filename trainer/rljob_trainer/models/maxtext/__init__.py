"""MaxText's decoders (``spec.model.backend: maxtext``, docs/maxtext.md), in their own Python 3.12 venv.

Here: the decoder and its config (``decoders``), the full-forward rollout (``rollout``), the vLLM weight
mapping (``vllm``) and the tiny test decoders (``testing``). Same rules as ``rljob_trainer.models``.
"""
