"""Run on CPU quietly where the TPU image finds no TPU: ``JAX_PLATFORMS=cpu`` before JAX is imported.

The trainer image carries jax[tpu]. Started where no TPU chip is attached (a laptop, CI, a CPU node) without
``JAX_PLATFORMS``, JAX loads libtpu anyway, and libtpu prints a page of errors ("could not determine TPU
accelerator type", "unexpected worker hostname", "Source Location Trace") before JAX falls back to the CPU.
The run is fine, but a user reads it as a crash. So when ``JAX_PLATFORMS`` is unset and JAX's own PCI scan
finds no TPU chip, the trainer sets ``JAX_PLATFORMS=cpu`` and says so in one line: the same outcome as
JAX's fallback, without the noise. Whoever sets ``JAX_PLATFORMS`` (the operator does for vLLM: ``tpu,cpu``;
``tpu`` to fail when no TPU is there) is obeyed as given.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, MutableMapping


def cpu_fallback(env: MutableMapping[str, str], tpu_chips: int | None) -> str | None:
    """The JAX_PLATFORMS to set, or None to leave JAX alone.

    ``tpu_chips`` is JAX's count of TPU chips on the PCI bus, None when it could not be counted (then JAX
    decides, as it would without this module).
    """
    if env.get("JAX_PLATFORMS") or tpu_chips is None or tpu_chips > 0:
        return None
    return "cpu"


def count_tpu_chips() -> int | None:
    """JAX's own PCI scan (what it uses to decide whether to initialise libtpu); None without libtpu (JAX
    then has no TPU to try and prints nothing) or without that helper (JAX decides)."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    try:
        from jax._src import hardware_utils  # importing jax initialises no backend: libtpu stays unloaded

        return hardware_utils.num_available_tpu_chips_and_device_id()[0]
    except Exception:  # a JAX without this helper: let JAX decide
        return None


def tell_jax(platforms: str) -> None:
    """JAX read ``JAX_PLATFORMS`` when it was imported (the chip count imports it): update its config too.
    Effective as long as no backend is up, which is the case before training starts."""
    jax = sys.modules.get("jax")
    if jax is not None:
        jax.config.update("jax_platforms", platforms)


def apply(
    env: MutableMapping[str, str] = os.environ,
    count: Callable[[], int | None] = count_tpu_chips,
    say: Callable[[str], None] = print,
    configure: Callable[[str], None] = tell_jax,
) -> None:
    """Set ``JAX_PLATFORMS=cpu`` (and say so) when no TPU is attached and nobody chose a platform."""
    if env.get("JAX_PLATFORMS"):
        return
    platforms = cpu_fallback(env, count())
    if platforms:
        env["JAX_PLATFORMS"] = platforms  # for child processes
        configure(platforms)
        say("no TPU chip attached: running on CPU (JAX_PLATFORMS=cpu; set JAX_PLATFORMS to choose)")
