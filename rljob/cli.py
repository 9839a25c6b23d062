"""The ``rljob`` command: validate, generate, render, train and operate.

Subcommands import their side lazily so ``rljob validate`` never loads JAX and the operator never
loads the trainer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rljob.api import load_manifests


def _validate(args: argparse.Namespace) -> int:
    status = 0
    for found in load_manifests(args.filename):
        if found.error is not None:
            print(f"error: {found.error}", file=sys.stderr)
            status = 1
        elif found.job is not None:
            print(f"{found.where}: RLJob {found.job.metadata.name} is valid")
    return status


def _crd(args: argparse.Namespace) -> int:
    from rljob.api.crd import CRD_FILENAME, crd_yaml
    from rljob.api.docs import api_markdown

    text = crd_yaml()
    if not args.output_dir:
        sys.stdout.write(text)
        return 0
    for folder in args.output_dir:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / CRD_FILENAME).write_text(text)
        print(f"wrote {Path(folder) / CRD_FILENAME}")
    if args.docs:
        Path(args.docs).write_text(api_markdown())
        print(f"wrote {args.docs}")
    return 0


def _render(args: argparse.Namespace) -> int:
    from rljob_operator.render import dump_yaml, render_objects

    found = load_manifests(args.filename)
    errors = [f.error for f in found if f.error is not None]
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors:
        return 1
    objects = [obj for f in found if f.job is not None for obj in render_objects(f.job)]
    sys.stdout.write(dump_yaml(objects))
    return 0


def _train(args: argparse.Namespace) -> int:
    from rljob_trainer.main import main as trainer_main

    return trainer_main(["--config", args.filename, *args.passthrough])


def _operator(args: argparse.Namespace) -> int:
    from rljob_operator.main import main as operator_main

    return operator_main(args.passthrough)


_FILENAME_HELP = (
    "RLJob manifest: a file, a folder (its .yaml/.yml/.json files) or - for stdin; multi-document files "
    "and kind: List are read as kubectl does (repeatable)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rljob", description="RL post-training (packed GRPO) on GKE TPUs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check RLJob manifests; exit 1 listing every error")
    p.add_argument("-f", "--filename", action="append", required=True, help=_FILENAME_HELP)
    p.set_defaults(func=_validate)

    p = sub.add_parser("crd", help="print the CRD generated from the model, or write it to folders")
    p.add_argument(
        "-o", "--output-dir", action="append", help="write <group>_<plural>.yaml here (repeatable)"
    )
    p.add_argument("--docs", help="also write the field reference (Markdown) to this file")
    p.set_defaults(func=_crd)

    p = sub.add_parser("render", help="print the ConfigMap and JobSet the operator would create (dry run)")
    p.add_argument("-f", "--filename", action="append", required=True, help=_FILENAME_HELP)
    p.set_defaults(func=_render)

    p = sub.add_parser(
        "train",
        help="run the trainer locally on an RLJob (CPU works)",
        description="Other arguments go to the trainer (e.g. --max-steps 5; see `rljob train -f X --help`).",
        add_help=False,
    )
    p.add_argument("-f", "--filename", required=True)
    p.set_defaults(func=_train, passthrough_ok=True)

    p = sub.add_parser(
        "operator", help="run the operator (arguments go to it; try `rljob operator --help`)", add_help=False
    )
    p.set_defaults(func=_operator, passthrough_ok=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # `train` and `operator` hand every argument they do not know to the trainer / operator parser.
    args, passthrough = parser.parse_known_args(argv)
    if passthrough and not getattr(args, "passthrough_ok", False):
        parser.error(f"unrecognized arguments: {' '.join(passthrough)}")
    args.passthrough = [a for a in passthrough if a != "--"]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
