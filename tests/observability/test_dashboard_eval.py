"""Every dashboard query, evaluated on a real Prometheus server over recorded series (recorded.py): a run
restarted in the window and a run scraped twice must show what the same run shows undisturbed.

Why a server and stored blocks: the queries run exactly as Grafana sends them (instant queries with its
variables filled in), over data that, like GKE Managed Prometheus, has no staleness markers, so a replaced
pod's series are still visible for 5 minutes after its last scrape.

Per query and evaluation: the undisturbed run ("steady") answers in at least one evaluation; the doubly
scraped run gives the same series and values; the restarted one gives the same series (one line per
process, not one per pod) and values within 10% (the restart's own gap: about 30 s without a scrape).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from charts.rljob import dashboard
from tests import procs
from tests.observability import recorded
from tests.observability.prom import Prometheus

EVALS = (
    (17 * 60, "2m"),  # the replaced pods' series still visible (no staleness markers)
    (22 * 60, "5m"),  # after the restart
    (30 * 60, "30m"),  # the window of the alert rules, holding the restart (the case)
)
"""(seconds into the run, $__rate_interval)."""
RESTART_TOLERANCE = 0.10


def _queries() -> list[tuple[str, str]]:
    d = dashboard.build()
    return [(f"{p['title']} [{t['refId']}]", t["expr"]) for p in d["panels"] for t in p["targets"]]


QUERIES = _queries()


@pytest.fixture(scope="module")
def server(prometheus_bin: Path, promtool: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """A Prometheus whose storage holds the recorded run (ended an hour ago), and the run's start."""
    work = tmp_path_factory.mktemp("dashboard-eval")
    start = (int(time.time()) // 60) * 60 - (recorded.MINUTES + 60) * 60
    (work / "run.om").write_text(recorded.openmetrics(start))
    r = subprocess.run(
        [
            str(promtool),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(work / "run.om"),
            str(work / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    prom = Prometheus(prometheus_bin, work, procs.free_port(), targets=[], rule_files=[])
    try:
        yield prom, start
    finally:
        prom.close()


def _eval(prom: Prometheus, expr: str, scenario: str, at: float, rate: str) -> dict[frozenset, float]:
    """The query as Grafana sends it for namespace ml and RLJob ``scenario``: {labels but rljob: value}."""
    concrete = expr.replace("$__rate_interval", rate).replace("$namespace", "ml").replace("$rljob", scenario)
    result = prom.api("query", query=concrete, time=f"{at:.3f}")["result"]
    out = {}
    for series in result:
        key = frozenset((k, v) for k, v in series["metric"].items() if k != "rljob")
        assert key not in out, f"two series for {dict(key)}: {concrete}"
        out[key] = float(series["value"][1])
    return out


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-12


@pytest.mark.parametrize(("title", "expr"), QUERIES, ids=[q[0] for q in QUERIES])
def test_panel_query_is_unmoved_by_a_restart_and_a_second_scrape(
    server: tuple, title: str, expr: str
) -> None:
    prom, start = server
    answered = False
    for offset, rate in EVALS:
        at = start + offset
        steady = _eval(prom, expr, "steady", at, rate)
        answered = answered or bool(steady)
        where = f"{title} at {offset // 60}m, rate window {rate}"
        dup = _eval(prom, expr, "dup", at, rate)
        assert dup.keys() == steady.keys(), f"{where}: scraped twice {dup} vs once {steady}"
        for key, value in steady.items():
            assert _close(dup[key], value, 1e-9), (
                f"{where} {dict(key)}: scraped twice {dup[key]}, once {value}"
            )
        restart = _eval(prom, expr, "restart", at, rate)
        assert restart.keys() == steady.keys(), f"{where}: restarted {restart} vs undisturbed {steady}"
        for key, value in steady.items():
            assert _close(restart[key], value, RESTART_TOLERANCE), (
                f"{where} {dict(key)}: restarted {restart[key]}, undisturbed {value}"
            )
    assert answered, f"{title}: no answer for the undisturbed run in any evaluation; the recording misses it"
