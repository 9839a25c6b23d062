#!/usr/bin/env python3
"""Write charts/rljob/files/rljob-dashboard.json from charts/rljob/dashboard.py.

Usage: hack/gen_dashboard.py [--check]   (--check: exit 1 if the checked-in JSON is out of date)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator"), str(ROOT / "trainer")]

from charts.rljob import dashboard  # noqa: E402

OUT = ROOT / "charts" / "rljob" / "files" / "rljob-dashboard.json"


def main(argv: list[str]) -> int:
    text = dashboard.render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run hack/gen_dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
