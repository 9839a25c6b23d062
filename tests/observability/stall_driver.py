"""The real trainer with one extra step callback that holds the training loop after a given step until a
file appears: what a hung collective looks like from outside (the /metrics thread keeps serving, no step
completes), then the hang clears and training continues.

Usage: python -m tests.observability.stall_driver CONFIG HOLD_AT_STEP RELEASE_FILE
Used by test_prometheus_e2e.py; the hold is bounded (10 minutes) so a failed test cannot leave it hanging.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rljob_trainer.run.main import train
from rljob_trainer.telemetry.progress import ConsoleProgress, StepReport

from rljob.api import load_rljob

HOLD_LIMIT_SECONDS = 600


class Hold:
    """After step ``at`` completes, block until ``release`` exists (or HOLD_LIMIT_SECONDS pass)."""

    def __init__(self, at: int, release: Path) -> None:
        self.at, self.release = at, release

    def __call__(self, r: StepReport) -> None:
        if r.step != self.at:
            return
        print(f"holding after step {r.step} until {self.release} exists", flush=True)
        deadline = time.monotonic() + HOLD_LIMIT_SECONDS
        while not self.release.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        print("released", flush=True)


def main(argv: list[str]) -> int:
    config, hold_at, release = argv
    job = load_rljob(config)
    run = train(job, [ConsoleProgress(), Hold(int(hold_at), Path(release))])
    print(f"done: {len(run.recorder.reports)} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
