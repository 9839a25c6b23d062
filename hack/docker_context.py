#!/usr/bin/env python3
"""The build context Docker sends for this repository, and whether every COPY of the Dockerfile finds its
source in it.

A COPY of a path that ``.dockerignore`` leaves out fails the image build with ``"/cli" not found``; copying
from the checkout instead (as hack/check_dockerfile.sh's replay once did) hides that. The context is computed
with the Docker SDK's port of moby's ``.dockerignore`` matcher (``docker.utils.build.PatternMatcher``), with
BuildKit's semantics: unlike the classic builder, BuildKit does not force the Dockerfile and ``.dockerignore``
into the context. tests/chart/test_dockerfile.py compares the result with a real BuildKit build's context.

Usage: hack/docker_context.py check            exit 1 naming each COPY source missing from the context
       hack/docker_context.py files            print the context's files, one per line
       hack/docker_context.py extract DIR      copy the context's files into DIR (the replay's source)
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from docker.utils.build import PatternMatcher

ROOT = Path(__file__).resolve().parent.parent


def dockerignore_patterns(root: Path) -> list[str]:
    """The patterns of root/.dockerignore, comments and blank lines left out (as Docker reads them)."""
    path = root / ".dockerignore"
    if not path.exists():
        return []
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def context_files(root: Path) -> set[str]:
    """Relative paths of the regular files and symlinks BuildKit sends from root."""
    matcher = PatternMatcher(dockerignore_patterns(root))
    # The SDK appends "!.dockerignore" (the classic builder always sends that file); BuildKit does not.
    added = matcher.patterns.pop()
    assert added.exclusion and added.cleaned_pattern == ".dockerignore", "docker SDK changed PatternMatcher"
    return {p for p in matcher.walk(str(root)) if not (root / p).is_dir() or (root / p).is_symlink()}


def copy_sources(dockerfile: str) -> list[tuple[int, str]]:
    """(line number, source) of each COPY/ADD that reads the build context (not ``--from`` another stage)."""
    out: list[tuple[int, str]] = []
    start, buf = 0, ""
    for number, raw in enumerate(dockerfile.splitlines(), 1):
        line = raw.rstrip()
        if not buf:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        elif line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        instruction, buf = buf + line, ""
        word, _, rest = instruction.strip().partition(" ")
        if word.upper() not in ("COPY", "ADD"):
            continue
        args = shlex.split(rest)
        if any(a.startswith("--from") for a in args):
            continue
        *sources, _dest = [a for a in args if not a.startswith("--")]
        out.extend((start, src) for src in sources)
    return out


def present(source: str, files: set[str]) -> bool:
    """Whether a COPY source names something in the context: a file, a folder holding files, or a glob."""
    path = os.path.normpath(source.lstrip("/"))
    if path == ".":
        return bool(files)
    if re.search(r"[*?\[]", path):
        return any(fnmatch.fnmatchcase(f, path) or fnmatch.fnmatchcase(f, path + "/*") for f in files)
    return path in files or any(f.startswith(path + "/") for f in files)


def missing_sources(root: Path) -> list[str]:
    """One line per COPY/ADD source of root/Dockerfile that the build context lacks."""
    files = context_files(root)
    return [
        f"Dockerfile:{line}: COPY {src}: not in the build context (.dockerignore leaves it out, or it does not exist)"
        for line, src in copy_sources((root / "Dockerfile").read_text())
        if not present(src, files)
    ]


def extract(root: Path, dest: Path) -> None:
    """Copy the context's files into dest, keeping their relative paths and modes."""
    for rel in sorted(context_files(root)):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target, follow_symlinks=False)


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"] and len(argv) == 1:
        problems = missing_sources(ROOT)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    if argv[:1] == ["files"] and len(argv) == 1:
        print("\n".join(sorted(context_files(ROOT))))
        return 0
    if argv[:1] == ["extract"] and len(argv) == 2:
        extract(ROOT, Path(argv[1]))
        return 0
    print(__doc__.split("Usage: ", 1)[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
