"""`rljob validate` and `kubectl apply --dry-run=server` give the same verdict on the same YAML text.

A generated corpus: one valid RLJob, then every YAML spelling of a number, boolean and null placed in
fields of each type (float, integer, boolean, string), anchors and merge keys, multi-document files, and
duplicate keys. kubectl reads YAML with sigs.k8s.io/yaml (go-yaml v2 rules) and the apiserver applies the
CRD's schema and CEL rules; rljob reads it with rljob/api/kubeyaml.py and applies the pydantic model.

One deliberate difference, asserted as such: a key repeated in one mapping. kubectl keeps the last value
silently; rljob refuses it with both line numbers (a repeated key is always a mistake).
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from rljob_cli.main import main

from tests.e2e.operator_proc import install_crd

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
BASE = """apiVersion: rljob.dev/v1alpha1
kind: RLJob
metadata:
  name: {name}
spec:
  image: trainer:1
  tpu: {{accelerator: tpu-v5-lite-podslice, topology: 2x4}}
  maxPrefillPredictLength: 64
  maxTargetLength: 256
  grpo:
    learningRate: {lr}
    numGenerations: {gens}
  suspend: {suspend}
"""
NUMBERS = ["1e-6", "4e-2", "1E-3", ".5", "1.", "+1.5", "0.001", "1e30", "1_000", "0x10", "017", "08", "0b11", "3", "-1", "1e400", ".inf", ".nan", "'1e-6'", "\"3\"", "!!float 3", "!!int '4'", "99999999999999999999", "~", "null", "Null", "NULL", ""]  # fmt: skip
BOOLS = ["true", "false", "True", "FALSE", "yes", "no", "on", "Off", "y", "N", "'true'", "1", "0", "~", "null", "!!bool yes", "!!str true"]  # fmt: skip


def corpus() -> list[tuple[str, str, bool]]:
    """(id, YAML text, whether rljob's verdict is meant to differ from kubectl's)."""
    texts: list[tuple[str, str, bool]] = [
        ("valid", BASE.format(name="x", lr="1e-6", gens="4", suspend="false"), False)
    ]
    texts += [(f"lr {v}", BASE.format(name="x", lr=v, gens="4", suspend="false"), False) for v in NUMBERS]
    texts += [
        (f"gens {v}", BASE.format(name="x", lr="0.001", gens=v, suspend="false"), False) for v in NUMBERS
    ]
    texts += [(f"suspend {v}", BASE.format(name="x", lr="0.001", gens="4", suspend=v), False) for v in BOOLS]
    texts += [(f"name {v}", BASE.format(name=v, lr="0.001", gens="4", suspend="false"), False) for v in ["yes", "'yes'", "1e3", "0x10", "~"]]  # fmt: skip
    good = BASE.format(name="x", lr="0.001", gens="4", suspend="false")
    texts.append(
        (
            "anchor and alias",
            good.replace("learningRate: 0.001", "learningRate: &lr 0.001\n    beta: *lr"),
            False,
        )
    )
    texts.append(("merge key", good.replace("  tpu: {", "  tpu:\n    <<: {") + "", False))
    texts.append(("two documents", good + "---\n" + good.replace("name: x", "name: y"), False))
    texts.append(("second document bad", good + "---\n" + good.replace("gens", "x").replace("numGenerations: 4", "numGenerations: 1"), False))  # fmt: skip
    texts.append(("duplicate key", good + "  suspend: true\n", True))
    return texts


def rljob_verdict(text: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether `rljob validate -f -` exits 0 on ``text`` (in-process: the same command, ~1 ms a case)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["validate", "-f", "-"]) == 0


CASES = corpus()


@pytest.fixture(scope="module")
def crd(cluster) -> None:
    install_crd()


@pytest.mark.parametrize(("case", "text", "differs"), CASES, ids=[c[0] for c in CASES])
def test_rljob_and_the_apiserver_agree(
    crd, namespace: str, monkeypatch: pytest.MonkeyPatch, case: str, text: str, differs: bool
) -> None:
    proc = subprocess.run(
        ["kubectl", "apply", "--dry-run=server", "-n", namespace, "-f", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    server_ok = proc.returncode == 0
    ours = rljob_verdict(text, monkeypatch)
    if differs:
        assert (server_ok, ours) == (True, False), proc.stderr
    else:
        assert ours == server_ok, f"kubectl: {proc.returncode} {proc.stderr.strip()}"
