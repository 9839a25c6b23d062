"""The `rljob` command, item by item: exit code and message for each thing a newcomer tries first."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import os
import re
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from rljob_cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-cpu.yaml"
NOT_UTF8 = EXAMPLE.read_bytes() + b"# caf\xe9\n"
EX_TEXT = EXAMPLE.read_text()


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``rljob argv`` in-process: (exit code, stdout, stderr); argparse's exits count as exit codes."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, data: bytes | str) -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def edited(**grpo: object) -> str:
    """The example with spec.grpo fields set to these YAML spellings (written as they are)."""
    text = EXAMPLE.read_text()
    for key, spelling in grpo.items():
        text = re.sub(rf"(?m)^(    {key}): .*$", rf"\g<1>: {spelling}", text)
    assert all(f"    {k}: {v}\n" in text for k, v in grpo.items())
    return text


def untrainable() -> str:
    """A valid RLJob the trainer refuses: a real model size without a checkpoint."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["model"]["size"] = "8b"
    return yaml.safe_dump(doc)


def bad_regex() -> str:
    """The example with a second reward whose pattern Python cannot compile (the CRD cannot tell: RE2)."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["rewards"].append({"name": "regex", "pattern": "<answer>(\\d+</answer>"})
    return yaml.safe_dump(doc)


def a_list(*items: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(i) for i in items]})


def unreachable_kubeconfig() -> str:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
            "users": [{"name": "u", "user": {"token": "t"}}],
        }
    )


@dataclass
class Case:
    """One thing a newcomer tries: ``rljob argv`` (``{name}`` = a file of ``files``, ``{tmp}`` the test's
    folder, ``{busy}`` a port in use), the exit code, texts that must and must not show."""

    id: str
    argv: list[str]
    code: int
    texts: tuple[str, ...]
    absent: tuple[str, ...] = ()
    files: dict[str, bytes | str] = field(default_factory=dict)
    stdin: bytes | None = None
    kubeconfig: str | None = None  # a file's text for $KUBECONFIG (default: a path that does not exist)
    process: bool = False  # a real `python -m rljob_cli` process (the trainer binds ports, handles signals)
    missing: tuple[str, ...] = ()  # modules this case pretends are not installed


EX = str(EXAMPLE)
CASES = [
    Case("version", ["--version"], 0, ("rljob 0.1.0",)),
    Case("train help lists the train options", ["train", "--help"], 0, ("--max-steps N", "--no-packing")),
    Case("train help names --metrics-port 0", ["train", "--help"], 0, ("0 picks a free port",)),
    Case("validate example", ["validate", "-f", EX], 0, ("RLJob tiny-cpu is valid",)),
    Case("validate folder", ["validate", "-f", str(ROOT / "examples")], 0, ("RLJob grpo-v5e is valid",)),
    Case(
        "validate stdin",
        ["validate", "-f", "-"],
        0,
        ("<stdin>: RLJob tiny-cpu is valid",),
        stdin=EXAMPLE.read_bytes(),
    ),
    Case(
        "validate 1e-6 and 4e-2 are numbers",
        ["validate", "-f", "{exp}"],
        0,
        ("exp.yaml: RLJob tiny-cpu is valid",),
        files={"exp": edited(learningRate="1e-6", beta="4e-2")},
    ),
    Case(
        "train reads 1e-6 as a number",  # refused for --max-steps 0 only: the file itself was read
        ["train", "-f", "{exp}", "--max-steps", "0"],
        2,
        ("spec.grpo.maxSteps: Input should be greater than or equal to 1",),
        absent=("learningRate", "beta"),
        files={"exp": edited(learningRate="1e-6", beta="4e-2")},
    ),
    Case(
        "validate 1e30 in an integer field",
        ["validate", "-f", "{big}"],
        1,
        ("spec.grpo.maxSteps: Input should be less than or equal to",),
        absent=("valid integer",),
        files={"big": edited(maxSteps="1e30")},
    ),
    Case(
        "validate not UTF-8",
        ["validate", "-f", "{latin1}"],
        1,
        ("not UTF-8 text (byte 0xe9)",),
        files={"latin1": NOT_UTF8},
    ),
    Case(
        "validate multi-doc: every document",
        ["validate", "-f", "{three}"],
        1,
        (
            "three.yaml (document 1) is invalid:\n  - spec.grpo.maxSteps",
            "three.yaml (document 2) is invalid:\n  - spec.grpo.batchSize",
            "three.yaml (document 3): RLJob tiny-cpu is valid",
        ),
        files={"three": "---\n".join([edited(maxSteps="-1"), edited(batchSize="0"), EXAMPLE.read_text()])},
    ),
    Case(
        "validate duplicate key",
        ["validate", "-f", "{dup}"],
        1,
        ('dup.yaml is not valid YAML:\n  - line 14: key "suspend" already set in this mapping at line 13',),
        files={
            "dup": EXAMPLE.read_text().replace("spec:\n", "spec:\n  suspend: false\n  suspend: true\n", 1)
        },
    ),
    Case(
        "validate List",
        ["validate", "-f", "{list}"],
        0,
        ("(items[1]): RLJob tiny-cpu is valid",),
        files={"list": a_list(EX_TEXT, EX_TEXT)},
    ),
    Case(
        "validate List: the bad item named",
        ["validate", "-f", "{list}"],
        1,
        (
            "list.yaml (items[0]): RLJob tiny-cpu is valid",
            "list.yaml (items[1]) is invalid:\n  - spec.grpo.beta",
        ),
        files={"list": a_list(EX_TEXT, edited(beta="-1"))},
    ),
    Case(
        "render not UTF-8",
        ["render", "-f", "{latin1}"],
        1,
        ("not UTF-8 text (byte 0xe9)",),
        files={"latin1": NOT_UTF8},
    ),
    Case(
        "train not UTF-8",
        ["train", "-f", "{latin1}"],
        2,
        ("not UTF-8 text (byte 0xe9)",),
        files={"latin1": NOT_UTF8},
    ),
    Case(
        "train missing file: named, not as the trainer's --config",
        ["train", "-f", "{tmp}/none.yaml"],
        2,
        ("none.yaml cannot be read:", "no such file or directory"),
        absent=("--config",),
    ),
    Case(
        "train untrainable: not 'invalid'",
        ["train", "-f", "{real}"],
        2,
        ("real.yaml cannot be trained:",),
        absent=("invalid",),
        files={"real": untrainable()},
    ),
    Case(
        "validate untrainable: valid",
        ["validate", "-f", "{real}"],
        0,
        ("is valid",),
        files={"real": untrainable()},
    ),
    Case(
        "validate regex that does not compile",
        ["validate", "-f", "{rx}"],
        1,
        (
            "rx.yaml is invalid:",
            "spec.rewards[1].pattern: not a Python regular expression: missing ), unterminated subpattern",
        ),
        absent=("is valid", "Traceback"),
        files={"rx": bad_regex()},
    ),
    Case(
        "train regex that does not compile",
        ["train", "-f", "{rx}"],
        2,
        ("spec.rewards[1].pattern: not a Python regular expression",),
        absent=("Traceback",),
        files={"rx": bad_regex()},
    ),
    Case("train bad override", ["train", "-f", EX, "--max-steps", "0"], 2, ("spec.grpo.maxSteps",)),
    Case(
        "train metrics port in use",
        ["train", "-f", EX, "--metrics-port", "{busy}"],
        2,
        (
            "spec.metrics.port: cannot serve metrics on port {busy}: Address already in use",
            "--metrics-port 0 for a free one (make demo DEMO_ARGS='--metrics-port 0')",
        ),
        absent=("Traceback",),
        process=True,
    ),
    Case(
        "train without JAX and Tunix names the extras",
        ["train", "-f", EX],
        2,
        ("jax and tunix not installed", "pip install 'rljob[trainer]' (CPU) or 'rljob[tpu]' (TPU)"),
        missing=("jax", "tunix"),
    ),
    Case(
        "crd -o unwritable",
        ["crd", "-o", "{latin1}/sub"],
        1,
        ("error: cannot write",),
        files={"latin1": NOT_UTF8},
    ),
    Case(
        "crd --docs without -o",
        ["crd", "--docs", "{tmp}/api.md"],
        0,
        ("kind: CustomResourceDefinition", "wrote"),
    ),
    Case(
        "crd --docs unwritable",
        ["crd", "--docs", "{latin1}/api.md"],
        1,
        ("error: cannot write",),
        files={"latin1": NOT_UTF8},
    ),
    Case(
        "operator without credentials",
        ["operator", "--connect-timeout", "1"],
        1,
        ("rljob operator: no Kubernetes credentials", "KUBECONFIG"),
    ),
    Case(
        "operator with an unreachable apiserver",
        ["operator", "--connect-timeout", "2"],
        1,
        ("rljob operator: cannot reach the Kubernetes API at https://127.0.0.1:", "within 2s"),
        kubeconfig=unreachable_kubeconfig(),
    ),
    Case("unknown argument", ["validate", "-f", EX, "--bogus"], 2, ("unrecognized arguments: --bogus",)),
    Case("no command", [], 2, ("required: COMMAND",)),
]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        yield busy.getsockname()[1]


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=[pytest.mark.slow] if c.process else []) for c in CASES],
    ids=[c.id for c in CASES],
)
def test_cli_table(tmp_path: Path, capsys, monkeypatch, busy_port: int, case: Case) -> None:
    names = {"tmp": str(tmp_path), "busy": str(busy_port)}
    names |= {name: write(tmp_path, f"{name}.yaml", data) for name, data in case.files.items()}
    argv = [a.format(**names) for a in case.argv]
    kubeconfig = write(tmp_path, "kubeconfig", case.kubeconfig) if case.kubeconfig else "/nonexistent/kc"
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    if case.process:
        done = subprocess.run(
            [sys.executable, "-m", "rljob_cli", *argv],
            input=case.stdin,
            capture_output=True,
            timeout=300,
            cwd=ROOT,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        code, output = done.returncode, (done.stdout + done.stderr).decode()
    else:
        find_spec = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda n, *a: None if n in case.missing else find_spec(n, *a)
        )
        if case.stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(case.stdin)))
        code, out, err = run(argv, capsys)
        output = out + err
    assert code == case.code, output
    assert [t.format(**names) for t in case.texts if t.format(**names) not in output] == [], output
    assert [t for t in (*case.absent, "Traceback") if t in output] == [], output


def test_crd_docs_without_output_dir_writes_the_docs(tmp_path: Path, capsys) -> None:
    assert run(["crd", "--docs", str(tmp_path / "api.md")], capsys)[0] == 0
    assert (tmp_path / "api.md").read_text().startswith("#")


def test_every_option_has_help() -> None:
    def parsers(p: argparse.ArgumentParser):
        yield p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    from rljob_operator.main import build_parser as operator_parser
    from rljob_trainer.run.main import parse_args  # noqa: F401  (its parser is add_train_options + --config)

    missing = [
        f"{p.prog} {'/'.join(a.option_strings) or a.dest}"
        for p in [*parsers(build_parser()), operator_parser()]
        for a in p._actions
        if not a.help
    ]
    assert missing == []


def test_metrics_port_0_picks_a_free_port() -> None:
    from rljob_trainer.run.main import apply_overrides, parse_args

    from rljob.api import load_rljob

    args = parse_args(["--config", str(EXAMPLE), "--metrics-port", "0"])
    port = apply_overrides(load_rljob(EXAMPLE), args, "x").spec.metrics.port
    assert port > 1024
    with socket.socket() as sock:
        sock.bind(("", port))  # free, as promised


def test_operator_help_passes_through() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rljob_cli", "operator", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and "--connect-timeout" in done.stdout, done.stderr


def test_render_prints_configmap_and_jobset(capsys) -> None:
    code, out, _ = run(["render", "-f", str(ROOT / "examples" / "rljob-v5e.yaml")], capsys)
    assert code == 0
    assert [d["kind"] for d in yaml.safe_load_all(out)] == ["ConfigMap", "JobSet"]


def test_the_api_package_imports_no_upper_layer() -> None:
    """rljob/ (the API) sits at the bottom: it never imports the operator, the trainer or the CLI."""
    upper = ("rljob_operator", "rljob_trainer", "rljob_cli", "kopf", "kubernetes", "jax")
    bad = []
    for path in (ROOT / "rljob").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in upper]
    assert bad == []


def test_the_extras_the_messages_name_exist() -> None:
    """The trainer's message names rljob[trainer] and rljob[tpu]: both are extras, and tpu brings JAX's TPU
    wheel (pip resolves it: docs/trainer.md)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"trainer", "tpu"} <= extras.keys()
    assert "rljob[trainer]" in extras["tpu"] and any(d.startswith("jax[tpu]==") for d in extras["tpu"])
