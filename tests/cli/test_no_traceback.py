"""No input reaches a user as a Python traceback: random bytes, random YAML, mutated manifests and random
arguments through every subcommand end in exit 0, 1 or 2 with a message.

In-process for speed (hundreds of inputs); a few real subprocesses check the same through the entry
points. ``train`` stops before training: ``rljob_trainer.run.main.train`` is replaced by a stub that returns
an empty run, because every input that gets that far is a valid RLJob, and training one is
tests/trainer's job (minutes each); what this test guards is the reading, checking and reporting on the
way there.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
import rljob_trainer.run.main as trainer_main
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rljob_cli.main import main
from rljob_trainer.telemetry.progress import StepRecorder

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(tempfile.mkdtemp(prefix="rljob-notraceback-"))
GOOD_LINES = (ROOT / "examples" / "tiny-cpu.yaml").read_text().splitlines()
SCALARS = ["1e-6", "1e30", "0x1f", "017", "yes", "Off", "~", "", ".inf", "-.nan", "'1'", '"x"', "[1", "{", "*a", "&a 1", "!!int x", "!!binary %", "2001-01-01", "9" * 30]  # fmt: skip
SWITCHES = {
    "train": ["--no-packing", "--quiet", "--help"],
    "operator": ["-A", "--standby", "--standalone", "-v"],
}
OPTIONS = {
    "validate": ["-f"],
    "render": ["-f"],
    "crd": ["-o", "--output-dir", "--docs"],
    "train": ["--max-steps", "--seed", "--metrics-port", "--workdir", "--log-every"],
    "operator": ["-n", "--liveness", "--metrics-port", "--peering", "--trainer-security-context"],
}
COMMANDS = sorted(OPTIONS)

yaml_like = st.text(alphabet=" \n\t-:[]{},&*!|>'\"#%@`?~.0123456789eExyabn", max_size=160)


@st.composite
def mutated_manifests(draw: st.DrawFn) -> str:
    """A valid manifest's YAML with one line changed: a value respelled, a line repeated or dropped."""
    lines = list(GOOD_LINES)
    i = draw(st.integers(0, len(lines) - 1))
    action = draw(st.sampled_from(["none", "respell", "repeat", "drop", "indent"]))
    if action == "respell" and ":" in lines[i]:
        key = lines[i].split(":")[0]
        lines[i] = f"{key}: {draw(st.sampled_from(SCALARS) | st.text(max_size=8))}"
    elif action == "repeat":
        lines.insert(i, lines[i])
    elif action == "drop":
        del lines[i]
    elif action == "indent":
        lines[i] = " " + lines[i]
    second = "\n---\n" + "\n".join(GOOD_LINES) if draw(st.booleans()) else ""
    return "\n".join(lines) + second + "\n"


@st.composite
def contents(draw: st.DrawFn) -> bytes:
    """Random bytes, random YAML-like text, or (most often, so most inputs get past the YAML reader) a
    mutated manifest."""
    kind = draw(st.sampled_from(["manifest", "manifest", "manifest", "manifest", "yaml", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    return (draw(yaml_like) if kind == "yaml" else draw(mutated_manifests())).encode()


def argument_lists(command: str) -> st.SearchStrategy[list[str]]:
    """Mostly well-formed command lines (so the input is read), sometimes with random tokens after."""
    source = st.sampled_from(["input.yaml", "input.yaml", "input.yaml", "-", "missing.yaml", "."])
    value = st.one_of(
        st.integers(-5, 70_000).map(str),
        st.sampled_from(["input.yaml", "-", "{}", "[1]", "1e3", "x"]),
        st.text(alphabet="abc-_.=019 {}\"'", max_size=10),  # no "/": nothing is written outside WORK
    )
    option = st.tuples(st.sampled_from(OPTIONS[command]), value).map(list)
    switch = st.sampled_from(SWITCHES.get(command, ["--help"])).map(lambda s: [s])
    options = st.lists(option | switch if command in SWITCHES else option, max_size=3)
    noise = st.lists(
        st.sampled_from([*OPTIONS[command], "--bogus", "-", "--"]) | value, min_size=1, max_size=3
    )
    head = [command] if command in ("crd", "operator") else None
    first = st.just(head) if head else source.map(lambda src: [command, "-f", src])
    none: st.SearchStrategy[list[list[str]]] = st.just([])
    extra = st.sampled_from([0, 0, 1]).flatmap(lambda n: options if n else none)
    tail = st.sampled_from([0, 0, 0, 1]).flatmap(lambda n: noise if n else st.just([]))
    return st.tuples(first, extra, tail).map(lambda p: [*p[0], *(x for o in p[1] for x in o), *p[2]])


top_level = st.lists(  # `rljob` itself: no command, an unknown one, its own options, random tokens
    st.sampled_from(["--version", "--help", "-h", "--bogus", "-", "--", "lint", *COMMANDS])
    | st.text(alphabet="abc-_.=019 {}\"'", max_size=10),
    max_size=3,
)


def _fake_train(job, callbacks=None):
    return types.SimpleNamespace(recorder=StepRecorder(max_steps=job.spec.grpo.maxSteps, packed=False))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([*COMMANDS, "rljob"]).flatmap(lambda c: top_level if c == "rljob" else argument_lists(c)),
    contents(),
    contents(),
)
def test_no_traceback_in_process(argv: list[str], data: bytes, stdin: bytes) -> None:
    for path in WORK.iterdir():  # what an earlier example wrote (crd -o .) must not be read by -f .
        path.unlink() if path.is_file() else None
    (WORK / "input.yaml").write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd(), trainer_main.train, sys.stdin, os.environ.get("KUBECONFIG")
    os.chdir(WORK)
    trainer_main.train = _fake_train
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    os.environ["KUBECONFIG"] = str(WORK / "no-kubeconfig")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
                code = exc.code
    finally:
        os.chdir(old[0])
        trainer_main.train, sys.stdin = old[1], old[2]
        os.environ.pop("KUBECONFIG") if old[3] is None else os.environ.__setitem__("KUBECONFIG", old[3])
    event(
        f"{argv[0] if argv and argv[0] in COMMANDS else 'rljob'} exit {code}"
    )  # --hypothesis-show-statistics: every command reaches 0, 1 and 2
    assert code in (0, 1, 2), (argv, err.getvalue())
    assert "Traceback" not in err.getvalue()
    if code == 1 and argv[:1] in (["validate"], ["render"]):
        assert err.getvalue().startswith("error: ")


SUBPROCESS_CASES = [
    (["-m", "rljob_cli", "validate", "-f", "-"], b"\xff\xfe\x00\xd8garbage"),
    (["-m", "rljob_cli", "render", "-f", "-"], b"a: [1\n"),
    (["-m", "rljob_cli", "train", "-f", "-"], b"kind: RLJob\nkind: RLJob\n"),
    (["-m", "rljob_trainer", "--config", "-"], bytes(range(256))),
    (["-m", "rljob_cli", "crd", "-o", "/proc/rljob"], b""),
    (["-m", "rljob_cli", "operator", "--connect-timeout", "1"], b""),
    (["-m", "rljob_cli", "train", "--max-steps", "x"], b""),
]


@pytest.mark.parametrize(
    ("argv", "stdin"), SUBPROCESS_CASES, ids=[" ".join(c[0][1:4]) for c in SUBPROCESS_CASES]
)
def test_no_traceback_in_a_real_process(argv: list[str], stdin: bytes) -> None:
    env = {**os.environ, "KUBECONFIG": "/nonexistent/kubeconfig", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, *argv], input=stdin, capture_output=True, timeout=120, cwd=ROOT, env=env
    )
    assert done.returncode in (1, 2), done.stderr
    assert b"Traceback" not in done.stderr and done.stderr.strip(), done.stderr
