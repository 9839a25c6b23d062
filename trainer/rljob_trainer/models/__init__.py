"""The models: family + size (+ config.json) -> a model, its tokenizer and its checkpoint.

Here: Tunix's families (``families``: qwen3, qwen2, llama3, gemma3), the random weights of a model built
without a checkpoint (``random_init``), the checks on config.json and the checkpoint files before JAX
(``hf_config``, ``checkpoint_files``), config.json's rope (``rope``), and MaxText's decoders with their
rollout, vLLM mapping and test models (``maxtext/``).

May import ``workload`` (sources, the tiny tokenizer) and ``packing``; never the run's lifecycle (``run``),
``telemetry`` or ``tunix_bridge`` (tests/trainer/test_layers.py).
"""
