"""JAX's persistent compilation cache, on by default (``run/compile_cache.py``): where it goes, that an
unusable directory only warns, and that a second start of the same job compiles nothing new."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rljob_trainer.run import compile_cache

from rljob.api import parse_rljob
from tests import procs
from tests.trainer.manifests import tiny_rljob

ROOT = Path(__file__).resolve().parents[2]


def spec(**paths: object):
    return parse_rljob(tiny_rljob(**paths)).spec


def test_directory_follows_the_spec_then_the_checkpoints_then_the_user_cache() -> None:
    env = {"HOME": "/home/u"}
    assert compile_cache.directory(spec(), env) == "/home/u/.cache/rljob/jax"
    assert compile_cache.directory(spec(), {**env, "XDG_CACHE_HOME": "/x"}) == "/x/rljob/jax"
    assert compile_cache.directory(spec(**{"checkpoint.directory": "gs://my-bucket/run/"}), env) == (
        "gs://my-bucket/run/compilation-cache"
    )
    explicit = spec(**{"checkpoint.directory": "/ckpt", "compilationCache.directory": "gs://my-bucket/xla"})
    assert compile_cache.directory(explicit, env) == "gs://my-bucket/xla"
    assert compile_cache.directory(spec(**{"compilationCache.enabled": False}), env) is None


def test_jax_s_own_switch_turns_it_off(tmp_path: Path) -> None:
    import jax

    saved = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        assert compile_cache.enable(str(tmp_path / "xla")) is None
    finally:
        jax.config.update("jax_enable_compilation_cache", saved)


def test_an_unwritable_directory_is_a_warning_not_a_failure(tmp_path: Path, caplog) -> None:
    import jax

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    before = jax.config.jax_compilation_cache_dir  # the suite's own (tests/jax_cache.py)
    saved = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", True)
    try:
        with caplog.at_level(logging.WARNING):
            assert compile_cache.enable(str(blocker / "cache")) is None  # its parent is a file
    finally:
        jax.config.update("jax_enable_compilation_cache", saved)
    assert "compilation cache off" in caplog.text
    assert jax.config.jax_compilation_cache_dir == before  # JAX was never pointed at it
    assert compile_cache.enable(None) is None


GS_SCRIPT = """
import sys
import jax, jax.numpy as jnp
from rljob_trainer.run import compile_cache
assert compile_cache.enable(sys.argv[1]) == sys.argv[1]
print(float(jax.jit(lambda x: jnp.sin(x) * 3)(jnp.float32(1.0))))
"""


@pytest.mark.slow
def test_a_gs_directory_is_written_through_jax_on_a_real_gcs_server(gcs) -> None:
    """``gs://`` as JAX opens it (etils.epath, gcsfs) against fake-gcs-server: the probe passes and the
    compiled program lands in the bucket."""
    gcs.client().create_bucket("xla-cache")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_ENABLE_COMPILATION_CACHE": "true"}
    proc = subprocess.run(
        [sys.executable, "-c", GS_SCRIPT, "gs://xla-cache/run-a/compilation-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = [b.name for b in gcs.client().list_blobs("xla-cache")]
    assert any(n.startswith("run-a/compilation-cache/jit_") for n in names), names
    assert not any(".rljob-probe" in n for n in names)  # the probe is removed


@pytest.mark.slow
def test_a_second_start_loads_every_program_from_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "xla"
    doc = yaml.safe_load((ROOT / "examples/tiny-cpu.yaml").read_text())
    doc["spec"]["compilationCache"] = {"directory": str(cache)}
    doc["spec"]["grpo"]["maxSteps"] = 3
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(doc))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_ENABLE_COMPILATION_CACHE": "true"}  # tests/conftest.py

    def start() -> str:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "rljob_trainer",
                "--config",
                str(config),
                "--metrics-port",
                str(procs.free_port()),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"compilation cache: {cache}" in proc.stdout
        return proc.stdout

    first = start()
    entries = {p.name for p in cache.iterdir()}
    assert len(entries) > 10, entries  # the model's steps, the sampler's programs, the packed shapes
    second = start()
    assert {p.name for p in cache.iterdir()} == entries  # every program came from the cache

    def rewards(out: str) -> list[str]:
        return [
            ln.split("reward")[1].split()[0]
            for ln in out.splitlines()
            if ln.startswith("step ") and " reward " in ln
        ]

    assert len(rewards(first)) == 3 and rewards(second) == rewards(first)  # same run, same numbers
