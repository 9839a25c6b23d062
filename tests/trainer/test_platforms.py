"""The CPU fallback of the TPU image (rljob_trainer.run.platforms): decided before JAX is imported. The image
itself (libtpu installed, no TPU attached: quiet) is run in tests/images/test_images.py."""

from __future__ import annotations

from rljob_trainer.run import platforms


def test_no_tpu_and_no_choice_means_cpu() -> None:
    assert platforms.cpu_fallback({}, tpu_chips=0) == "cpu"


def test_a_tpu_or_an_unknown_count_leaves_jax_alone() -> None:
    assert platforms.cpu_fallback({}, tpu_chips=4) is None
    assert platforms.cpu_fallback({}, tpu_chips=None) is None


def test_a_platform_set_by_the_user_or_the_operator_is_obeyed() -> None:
    for value in ("tpu", "tpu,cpu", "cpu"):
        assert platforms.cpu_fallback({"JAX_PLATFORMS": value}, tpu_chips=0) is None


def test_apply_sets_the_variable_and_says_so_once() -> None:
    env: dict[str, str] = {}
    said: list[str] = []
    configured: list[str] = []
    platforms.apply(env, count=lambda: 0, say=said.append, configure=configured.append)
    assert env == {"JAX_PLATFORMS": "cpu"}
    assert configured == ["cpu"]  # JAX already imported by the count: its config is told too
    assert len(said) == 1 and "JAX_PLATFORMS=cpu" in said[0]
    platforms.apply(env, count=lambda: 0, say=said.append, configure=configured.append)  # already chosen
    assert len(said) == 1 and configured == ["cpu"]


def test_apply_does_not_count_when_the_platform_is_chosen() -> None:
    def count() -> int:
        raise AssertionError("counted TPU chips although JAX_PLATFORMS was set")

    platforms.apply({"JAX_PLATFORMS": "tpu"}, count=count, say=print, configure=print)


def test_without_libtpu_the_count_is_unknown() -> None:
    """The dev venv has plain jax (no libtpu): the trainer behaves there exactly as before."""
    assert platforms.count_tpu_chips() is None
