"""The `rljob` command, item by item: exit code and message for each thing a newcomer tries first."""

from __future__ import annotations

import argparse
import ast
import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rljob_cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny-cpu.yaml"
NOT_UTF8 = EXAMPLE.read_bytes() + b"# caf\xe9\n"
TWO_DOCS_SECOND_BAD = (
    EXAMPLE.read_text() + "---\n" + EXAMPLE.read_text().replace("maxSteps: 25", "maxSteps: -1")
)
DUPLICATE_KEY = EXAMPLE.read_text().replace("spec:\n", "spec:\n  suspend: false\n  suspend: true\n", 1)
A_LIST = yaml.safe_dump(
    {"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(EXAMPLE.read_text())] * 2}
)


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


def untrainable(tmp_path: Path) -> str:
    """A valid RLJob the trainer refuses: a real model size without a checkpoint."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["model"]["size"] = "8b"
    return write(tmp_path, "real.yaml", yaml.safe_dump(doc))


# (id, argv (with {tmp} files made by the case), exit code, text expected on stdout+stderr)
CASES = [
    ("version", ["--version"], 0, "rljob "),
    ("train help lists the train options", ["train", "--help"], 0, "--max-steps N"),
    ("train help names --metrics-port 0", ["train", "--help"], 0, "0 picks a free port"),
    ("validate example", ["validate", "-f", str(EXAMPLE)], 0, "RLJob tiny-cpu is valid"),
    ("validate folder", ["validate", "-f", str(ROOT / "examples")], 0, "RLJob grpo-v5e is valid"),
    ("validate not UTF-8", ["validate", "-f", "{notutf8}"], 1, "not UTF-8 text (byte 0xe9)"),
    (
        "validate multi-doc",
        ["validate", "-f", "{twodocs}"],
        1,
        "(document 2) is invalid:\n  - spec.grpo.maxSteps",
    ),
    (
        "validate duplicate key",
        ["validate", "-f", "{dup}"],
        1,
        'key "suspend" already set in this mapping at line',
    ),
    ("validate List", ["validate", "-f", "{list}"], 0, "(items[1]): RLJob tiny-cpu is valid"),
    ("render not UTF-8", ["render", "-f", "{notutf8}"], 1, "not UTF-8 text (byte 0xe9)"),
    ("train not UTF-8", ["train", "-f", "{notutf8}"], 2, "not UTF-8 text (byte 0xe9)"),
    ("train missing file", ["train", "-f", "{tmp}/none.yaml"], 2, "no such file or directory"),
    ("train untrainable: not 'invalid'", ["train", "-f", "{real}"], 2, "real.yaml cannot be trained:"),
    ("validate untrainable: valid", ["validate", "-f", "{real}"], 0, "is valid"),
    ("train bad override", ["train", "-f", str(EXAMPLE), "--max-steps", "0"], 2, "spec.grpo.maxSteps"),
    ("crd -o unwritable", ["crd", "-o", "{notutf8}/sub"], 1, "error: cannot write"),
    ("crd --docs without -o", ["crd", "--docs", "{tmp}/api.md"], 0, "kind: CustomResourceDefinition"),
    ("crd --docs unwritable", ["crd", "--docs", "{notutf8}/api.md"], 1, "error: cannot write"),
    ("unknown argument", ["validate", "-f", str(EXAMPLE), "--bogus"], 2, "unrecognized arguments: --bogus"),
    ("no command", [], 2, "required: COMMAND"),
]


@pytest.mark.parametrize(("case", "argv", "code", "text"), CASES, ids=[c[0] for c in CASES])
def test_cli_table(tmp_path: Path, capsys, case: str, argv: list[str], code: int, text: str) -> None:
    files = {
        "tmp": str(tmp_path),
        "notutf8": write(tmp_path, "latin1.yaml", NOT_UTF8),
        "twodocs": write(tmp_path, "two.yaml", TWO_DOCS_SECOND_BAD),
        "dup": write(tmp_path, "dup.yaml", DUPLICATE_KEY),
        "list": write(tmp_path, "list.yaml", A_LIST),
    }
    if any("{real}" in a for a in argv):
        files["real"] = untrainable(tmp_path)
    got, out, err = run([a.format(**files) for a in argv], capsys)
    assert (got, text in out + err) == (code, True), out + err
    assert "Traceback" not in err and "is invalid" not in (err if "untrainable" in case else "")


def test_crd_docs_without_output_dir_writes_the_docs(tmp_path: Path, capsys) -> None:
    assert run(["crd", "--docs", str(tmp_path / "api.md")], capsys)[0] == 0
    assert (tmp_path / "api.md").read_text().startswith("#")


def test_validate_reads_stdin(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(EXAMPLE.read_bytes())))
    assert run(["validate", "-f", "-"], capsys)[:2] == (0, "<stdin>: RLJob tiny-cpu is valid\n")


def test_operator_without_a_cluster_exits_1_with_a_hint(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = run(["operator", "--connect-timeout", "1"], capsys)
    assert code == 1 and "no Kubernetes credentials" in err and "KUBECONFIG" in err


def test_operator_with_an_unreachable_apiserver_gives_up_in_bounded_time(tmp_path, monkeypatch, capsys):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    monkeypatch.setenv("KUBECONFIG", write(tmp_path, "kc", yaml.safe_dump(kubeconfig)))
    code, _, err = run(["operator", "--connect-timeout", "2"], capsys)
    assert code == 1 and f"cannot reach the Kubernetes API at https://127.0.0.1:{port} within 2s" in err


def test_every_option_has_help() -> None:
    def parsers(p: argparse.ArgumentParser):
        yield p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    from rljob_operator.main import build_parser as operator_parser
    from rljob_trainer.main import parse_args  # noqa: F401  (its parser is add_train_options + --config)

    missing = [
        f"{p.prog} {'/'.join(a.option_strings) or a.dest}"
        for p in [*parsers(build_parser()), operator_parser()]
        for a in p._actions
        if not a.help
    ]
    assert missing == []


def test_metrics_port_0_picks_a_free_port() -> None:
    from rljob_trainer.main import apply_overrides, parse_args

    from rljob.api import load_rljob

    args = parse_args(["--config", str(EXAMPLE), "--metrics-port", "0"])
    port = apply_overrides(load_rljob(EXAMPLE), args, "x").spec.metrics.port
    assert port > 1024
    with socket.socket() as sock:
        sock.bind(("", port))  # free, as promised


@pytest.mark.slow
def test_trainer_with_its_metrics_port_in_use_exits_2_with_a_hint() -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "rljob_cli", "train", "-f", str(EXAMPLE), "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
    assert done.returncode == 2, done.stderr
    assert f"spec.metrics.port: cannot serve metrics on port {port}" in done.stderr
    assert "--metrics-port 0" in done.stderr and "Traceback" not in done.stderr


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
