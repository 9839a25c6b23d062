"""The ``rljob`` command: validate, generate, render, train and operate.

Subcommands import their side lazily, so ``rljob validate`` never loads JAX and the operator never loads
the trainer. Exit codes: 0 done, 1 the input or the environment is wrong (an invalid RLJob, a file that
cannot be written, no cluster), 2 bad usage (argparse) or a config the trainer refuses. No input ends in a
Python traceback: every expected failure is a one-line-per-problem message (tests/cli/).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from pathlib import Path

from rljob.api import RLJobError, load_manifests
from rljob.api.spec import RLJob

FILENAME_HELP = (
    "RLJob manifest: a file, a folder (its .yaml/.yml/.json files) or - for stdin; multi-document files "
    "and kind: List are read as kubectl reads them"
)


def _version() -> str:
    try:
        return importlib.metadata.version("rljob")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown (not installed)"


def _error(message: object) -> None:
    print(f"error: {message}", file=sys.stderr)


def _validate(args: argparse.Namespace) -> int:
    """Exit 1 if a manifest is invalid; with --check-files, 2 if a valid one names local files (checkpoint,
    tokenizer, data) that the trainer would refuse, by the trainer's own start-up checks."""
    status = 0
    for found in load_manifests(args.filename):
        errors = _reward_errors(found.job) if found.job is not None else []
        if found.error is not None:
            _error(found.error)
            status = 1
        elif errors:
            _error(RLJobError(errors, found.where))
            status = 1
        elif found.job is not None:
            problems = _file_problems(found.job) if args.check_files else []
            if problems:
                _error(f"{found.where}: RLJob {found.job.metadata.name} cannot be trained:")
                for line in problems:
                    print(f"  - {line}", file=sys.stderr)
                status = max(status, 2)
                continue
            checked = " (local files checked)" if args.check_files else ""
            print(f"{found.where}: RLJob {found.job.metadata.name} is valid{checked}")
    return status


def _reward_errors(job: RLJob) -> list[str]:
    """What the CRD cannot check but every trainer would refuse: regex patterns Python cannot compile (the
    apiserver's regular expressions are RE2). The trainer's own check (rljob_trainer.workload.rewards), which imports
    nothing heavy."""
    from rljob_trainer.workload.rewards import pattern_errors

    return pattern_errors(job.spec.rewards or ())


def _file_problems(job: RLJob) -> list[str]:
    """The trainer's checks that need no JAX: spec.model against its checkpoint's config.json, tensor
    headers and tokenizer, the data file, reward patterns (remote sources: their form only)."""
    from rljob_trainer.run import main as trainer
    from rljob_trainer.run import startup

    return trainer.preflight(job) or startup.check(job)


def _write(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` (creating its folder); False, with a message, when that fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        _error(f"cannot write {path}: {exc.strerror or exc}")
        return False
    print(f"wrote {path}", file=sys.stderr)
    return True


def _crd(args: argparse.Namespace) -> int:
    from rljob.api.crd import CRD_FILENAME, crd_yaml
    from rljob.api.docs import api_markdown

    text = crd_yaml()
    if not args.output_dir:
        sys.stdout.write(text)
    ok = all(_write(Path(folder) / CRD_FILENAME, text) for folder in args.output_dir or [])
    if args.docs:
        ok = _write(Path(args.docs), api_markdown()) and ok
    return 0 if ok else 1


def _render(args: argparse.Namespace) -> int:
    from rljob_operator.render import dump_yaml, render_objects

    found = load_manifests(args.filename)
    errors = [f.error for f in found if f.error is not None]
    for error in errors:
        _error(error)
    if errors:
        return 1
    objects = [obj for f in found if f.job is not None for obj in render_objects(f.job)]
    sys.stdout.write(dump_yaml(objects))
    return 0


def _train(args: argparse.Namespace) -> int:
    from rljob_trainer.run.main import run

    args.config = args.filename
    return run(args)


def _operator(args: argparse.Namespace) -> int:
    try:
        from rljob_operator.main import main as operator_main
    except ImportError as exc:
        _error(f"the operator needs {exc.name}: pip install 'rljob[operator]'")
        return 1
    return operator_main(args.passthrough)


def build_parser() -> argparse.ArgumentParser:
    from rljob_trainer.run.options import add_train_options  # argparse only: no trainer dependencies

    parser = argparse.ArgumentParser(prog="rljob", description="RL post-training (packed GRPO) on GKE TPUs.")
    parser.add_argument("--version", action="version", version=f"rljob {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of:")

    p = sub.add_parser(
        "validate",
        help="check RLJob manifests; exit 1 listing every error",
        description="Check RLJob manifests by the same rules as the CRD; list every error with its file, "
        "document and field; exit 1 if any.",
    )
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE", help=FILENAME_HELP)
    p.add_argument(
        "--check-files",
        action="store_true",
        help="also run the trainer's start-up checks on local files (checkpoint config.json, tensor shapes "
        "and tokenizer; the data file); exit 2 if the trainer would refuse them",
    )
    p.set_defaults(func=_validate)

    p = sub.add_parser(
        "crd",
        help="print the CRD generated from the model, or write it (and the field reference) to files",
        description="Without -o the CRD goes to stdout; --docs also writes the field reference.",
    )
    p.add_argument(
        "-o",
        "--output-dir",
        action="append",
        metavar="DIR",
        help="write <group>_<plural>.yaml into this folder instead of stdout (repeatable)",
    )
    p.add_argument("--docs", metavar="FILE", help="also write the field reference (Markdown) to this file")
    p.set_defaults(func=_crd)

    p = sub.add_parser(
        "render",
        help="print the ConfigMap and JobSet the operator would create (dry run)",
        description="Render RLJobs into the objects the operator creates; nothing is sent to a cluster.",
    )
    p.add_argument("-f", "--filename", action="append", required=True, metavar="FILE", help=FILENAME_HELP)
    p.set_defaults(func=_render)

    p = sub.add_parser(
        "train",
        help="run the trainer locally on an RLJob (CPU works)",
        description="Train an RLJob here, as the operator's pods do (python -m rljob_trainer). Exit 0 "
        "trained, 2 a config this trainer refuses (the field is named), 1 a crash.",
    )
    p.add_argument("-f", "--filename", required=True, metavar="FILE", help="RLJob manifest, or - for stdin")
    add_train_options(p)
    p.set_defaults(func=_train)

    p = sub.add_parser(
        "operator",
        help="run the operator against the current kubeconfig (try `rljob operator --help`)",
        add_help=False,
    )
    p.set_defaults(func=_operator, passthrough_ok=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # `operator` hands every argument to the operator's own parser.
    args, passthrough = parser.parse_known_args(argv)
    if passthrough and not getattr(args, "passthrough_ok", False):
        parser.error(f"unrecognized arguments: {' '.join(passthrough)}")
    args.passthrough = [a for a in passthrough if a != "--"]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
