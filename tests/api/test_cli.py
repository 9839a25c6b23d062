"""The `rljob` command's own plumbing: render, crd, and argument pass-through to trainer/operator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from rljob.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_render_prints_configmap_and_jobset(capsys) -> None:
    assert main(["render", "-f", str(ROOT / "examples" / "rljob-v5e.yaml")]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds == ["ConfigMap", "JobSet"]


def test_crd_prints_the_generated_crd(capsys) -> None:
    assert main(["crd"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["kind"] == "CustomResourceDefinition"


def test_operator_and_train_pass_their_arguments_on() -> None:
    for argv in (["operator", "--help"], ["train", "-f", "examples/tiny-cpu.yaml", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "rljob", *argv], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert "usage:" in done.stdout


def test_unknown_arguments_are_refused_elsewhere(capsys) -> None:
    try:
        main(["validate", "-f", "x.yaml", "--bogus"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "--bogus" in capsys.readouterr().err
