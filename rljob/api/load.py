"""Reading RLJobs from YAML, with every error reported in Kubernetes' field-path form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rljob.api.spec import RLJob


class RLJobError(ValueError):
    """An RLJob that does not validate; ``errors`` lists every problem as ``path: message``."""

    def __init__(self, errors: list[str], source: str = "RLJob") -> None:
        self.errors = errors
        super().__init__(f"{source} is invalid:\n" + "\n".join(f"  - {e}" for e in errors))


def _path(loc: tuple[Any, ...]) -> str:
    """('spec', 'grpo', 'beta') -> 'spec.grpo.beta'; list indexes as [i]; union branches dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in str(part) or str(part).startswith(("function-", "literal[", "constrained-")):
            continue  # pydantic's name for a union branch or validator, not a field
        else:
            out += ("." if out else "") + str(part)
    return out


def errors_of(exc: ValidationError) -> list[str]:
    """Flatten a pydantic ValidationError into ``path: message`` lines (cross-field rules included)."""
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "value_error" and not err["loc"]:
            lines.extend(msg.splitlines())  # the cross-field rules: already one "path: message" per line
        else:
            lines.append(f"{_path(err['loc'])}: {msg}")
    return list(dict.fromkeys(lines))


def parse_rljob(obj: Any, source: str = "RLJob") -> RLJob:
    """Validate a decoded manifest; raise RLJobError listing every problem."""
    if not isinstance(obj, dict):
        raise RLJobError([f"<root>: expected a mapping, got {type(obj).__name__}"], source)
    try:
        return RLJob.model_validate(obj)
    except ValidationError as exc:
        raise RLJobError(errors_of(exc), source) from None


def load_rljobs(path: str | Path) -> list[RLJob]:
    """Every RLJob in a (multi-document) YAML file; documents of other kinds are an error."""
    text = Path(path).read_text()
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise RLJobError([f"<yaml>: {exc}"], str(path)) from None
    if not docs:
        raise RLJobError(["<root>: no YAML document found"], str(path))
    return [
        parse_rljob(d, f"{path} (document {i + 1})" if len(docs) > 1 else str(path))
        for i, d in enumerate(docs)
    ]


def load_rljob(path: str | Path) -> RLJob:
    """The single RLJob in a YAML file."""
    jobs = load_rljobs(path)
    if len(jobs) != 1:
        raise RLJobError([f"<root>: expected one RLJob, found {len(jobs)}"], str(path))
    return jobs[0]


def to_manifest(job: RLJob) -> dict[str, Any]:
    """The RLJob as a plain manifest (wire names, unset fields left out)."""
    return job.model_dump(mode="json", exclude_none=True)
