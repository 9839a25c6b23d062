"""Burst benchmark: N RLJobs created at once; how fast does the operator turn each into a JobSet?

    .venv/bin/python bench/burst.py                    # 200 RLJobs against the simulated cluster
    .venv/bin/python bench/burst.py --profile /tmp/op.prof   # the operator under cProfile
    .venv/bin/python bench/burst.py --record           # also append the result to docs/reliability.md
    RLJOB_PROGRESS_INTERVAL_SECONDS=2 .venv/bin/python bench/burst.py --count 100 --running 100
                                                       # the burst while 100 other RLJobs are Running

Starts (or attaches to) the simulated cluster (hack/cluster/up.sh), runs the operator as a subprocess
watching one fresh namespace, then creates the RLJobs from a thread pool through the Python client (so the
creates overlap as they would with many users; ``kubectl apply`` of a list would send them one by one). A
watch on JobSets and one on RLJobs record, per RLJob, when its JobSet appeared and when its status first
named the JobSet. Latency is measured from the moment the create call returned (the RLJob is stored and
visible to watches from then on) to that event, all on this machine's monotonic clock.

Reports p50/p99/max of apply -> JobSet and apply -> status, total time, and the operator's peak RSS
(``VmHWM`` from /proc: the kernel's high-water mark, so no sampling can miss the peak). Goal on the CI-sized
machine: p99 <= 2 s and RSS <= 200 MB (issue 8). Not a test: the numbers depend on the machine's load.

``--running N`` first makes N other RLJobs reach phase Running (bench/burst_running.py: fake TPU nodes and
fake trainer endpoints of this run only, removed afterwards), so the progress timer of each reads its host 0
every ``RLJOB_PROGRESS_INTERVAL_SECONDS`` during the burst; it also reports the operator's CPU while only
those run, its event loop's lag during the burst and how many /metrics reads the timers made.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from kubernetes import client, config, watch  # noqa: E402

from bench import burst_running  # noqa: E402
from rljob.api.spec import GROUP, PLURAL, VERSION  # noqa: E402
from tests.e2e.kube import kubectl  # noqa: E402
from tests.e2e.operator_proc import OperatorProcess, install_crd  # noqa: E402

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
DOC = REPO / "docs" / "reliability.md"
PROGRESS_ENV = "RLJOB_PROGRESS_INTERVAL_SECONDS"
MARKER = "<!-- burst results: bench/burst.py --record appends rows above this line -->"


def cluster_env() -> Path:
    """Bring the cluster up (or attach), put its binaries on PATH; return the kubeconfig."""
    hack = REPO / "hack" / "cluster"
    dirs = subprocess.run([hack / "build.sh", "--print"], capture_output=True, text=True, check=True)
    os.environ["PATH"] = os.pathsep.join([*dirs.stdout.split(), os.environ["PATH"]])
    subprocess.run([hack / "up.sh"], check=True, stdout=subprocess.DEVNULL)
    kubeconfig = Path(os.environ.get("RLJOB_CLUSTER_DIR", "/tmp/rljob-cluster")) / "kubeconfig"
    os.environ["KUBECONFIG"] = str(kubeconfig)
    return kubeconfig


def rljob(name: str, suspend: bool) -> dict[str, Any]:
    """A v5e 1x1 RLJob. The simulated cluster has no 1x1 pool, so JobSet, Job and pod are all created (the
    JobSet and Job controllers do their full share of work) but the pod is never scheduled: 200 running
    jobs could not fit anyway, and pods bound to nodes make the cleanup slow for whatever runs next."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "image": "rljob-trainer:bench",
            "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "1x1"},
            "suspend": suspend,
        },
    }


class Watcher(threading.Thread):
    """Records the first time each object matching ``done`` is seen, by name."""

    def __init__(self, api: client.CustomObjectsApi, resource: tuple[str, str, str], ns: str, done: Any):
        super().__init__(daemon=True)
        self.api, self.resource, self.ns, self.done = api, resource, ns, done
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        group, version, plural = self.resource
        while not self.stop.is_set():
            listed = self.api.list_namespaced_custom_object(group, version, self.ns, plural)
            for obj in listed["items"]:
                self._note(obj)
            self.ready.set()
            w = watch.Watch()
            try:
                for event in w.stream(
                    self.api.list_namespaced_custom_object, group, version, self.ns, plural,
                    resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=30,
                ):  # fmt: skip
                    self._note(event["object"])
                    if self.stop.is_set():
                        break
            except Exception as exc:  # a dropped watch: list again (_note is idempotent)
                print(f"watch {plural} restarted: {exc!r}", file=sys.stderr)

    def _note(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name not in self.seen and self.done(obj):
            self.seen[name] = time.monotonic()


class LatencyProbe(threading.Thread):
    """GETs one small object every 0.2 s and records how long the apiserver takes: the operator's handlers
    make four such sequential calls per RLJob, so this is what bounds their speed on a busy machine."""

    def __init__(self, api: client.CoreV1Api, ns: str):
        super().__init__(daemon=True)
        self.api, self.ns = api, ns
        self.samples: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            t = time.monotonic()
            self.api.read_namespace(self.ns)
            self.samples.append(time.monotonic() - t)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def interval_text(result: dict[str, Any]) -> str:
    return f"read every {result['progress_interval_s']:g} s" if result["progress_interval_s"] > 0 else "off"


def running_note(result: dict[str, Any]) -> str:
    """The --running figures and the loop lag for the table's note column ("" without them)."""
    parts = []
    if result["running"]:
        parts.append(
            f"{result['running']} Running RLJobs, progress {interval_text(result)}; "
            f"operator CPU with only those {result['steady_cpu_pct']}% "
            f"({result['steady_reads_per_s']} reads/s), {result['burst_reads']} reads during the burst"
        )
    if result.get("lag_p50_ms") is not None:
        parts.append(
            f"loop lag p50/p99/max {result['lag_p50_ms']}/{result['lag_p99_ms']}/{result['lag_max_ms']} ms"
        )
    return "; " + "; ".join(parts) if parts else ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--workers", type=int, default=16, help="client threads creating RLJobs")
    p.add_argument("--suspend", action="store_true", help="create the RLJobs suspended (no pods at all)")
    p.add_argument("--verbose-operator", action="store_true", help="run the operator with --verbose")
    p.add_argument("--profile", type=Path, default=None, help="run the operator under cProfile, write here")
    p.add_argument("--py-spy", type=Path, default=None, help="sample the operator (all threads) with py-spy")
    p.add_argument("--max-workers", type=int, default=None, help="experiment: kopf handler threads")
    p.add_argument("--running", type=int, default=0, help="first make this many other RLJobs Running")
    p.add_argument("--steady", type=float, default=20, help="seconds of operator CPU taken with only those")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--record", action="store_true", help=f"append the result to {DOC.relative_to(REPO)}")
    p.add_argument("--note", default="", help="free text for the recorded row")
    args = p.parse_args()

    kubeconfig = cluster_env()
    install_crd()
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    api = client.CustomObjectsApi(api_client)
    run_id = uuid.uuid4().hex[:6]
    ns, run_ns = f"bench-burst-{run_id}", f"bench-burst-{run_id}-run"
    namespaces = [ns, run_ns] if args.running else [ns]
    for name in namespaces:
        kubectl("create", "namespace", name)
    log_dir = Path(os.environ.get("RLJOB_CLUSTER_DIR", "/tmp/rljob-cluster")) / "logs"
    lag_file = log_dir / f"burst-{run_id}-loop-lag.txt"
    os.environ["RLJOB_BENCH_LAG_FILE"] = str(lag_file)
    interval = float(os.environ.get(PROGRESS_ENV) or 30)
    # cProfile cannot run `-c CODE`: under --profile the operator runs plainly (no lag probe)
    entry = (
        ("-m", "rljob_operator")
        if args.profile
        else ("-c", burst_running.LAG_ENTRY.format(workers=args.max_workers))
    )
    op = OperatorProcess(
        log_dir,
        namespaces,
        identity="burst",
        verbose=args.verbose_operator,
        profile=args.profile,
        entry=entry,
    )
    running = burst_running.RunningRLJobs(api, run_ns, args.running, run_id) if args.running else None
    extra: dict[str, Any] = {}
    jobsets = Watcher(api, JOBSET, ns, lambda _: True)
    statuses = Watcher(api, (GROUP, VERSION, PLURAL), ns, lambda o: (o.get("status") or {}).get("jobSetName"))
    probe = LatencyProbe(client.CoreV1Api(api_client), ns)
    try:
        op.start()
        if running:
            running.start()
            waited = running.wait(progress=interval > 0, timeout=args.timeout)
            print(f"{args.running} RLJobs Running{' with progress' * (interval > 0)} after {waited:.0f} s")
            time.sleep(max(5.0, 2 * interval) if interval > 0 else 5.0)  # every timer has fired again
            cpu_a, reads_a = cpu_seconds(op.pid), running.trainers.requests
            time.sleep(args.steady)
            extra["steady_cpu_pct"] = round(100 * (cpu_seconds(op.pid) - cpu_a) / args.steady, 1)
            extra["steady_reads_per_s"] = round((running.trainers.requests - reads_a) / args.steady, 1)
        rss_idle = op.rss_bytes()
        for w in (jobsets, statuses):
            w.start()
            w.ready.wait(30)
        time.sleep(2)  # let the operator's own watches settle after startup
        names = [f"burst-{i:03d}" for i in range(args.count)]
        applied: dict[str, float] = {}

        def create(name: str) -> None:
            api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, rljob(name, args.suspend))
            applied[name] = time.monotonic()

        spy = None
        if args.py_spy:  # sampling profiler over every thread (cProfile only sees the event loop's)
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(op.pid), "--rate", "50", "--nonblocking",
                                    "--format", "raw", "-o", str(args.py_spy)])  # fmt: skip
            time.sleep(1)
        load_before = load_average()
        probe.start()
        cpu0 = cpu_seconds(op.pid)
        t0 = time.monotonic()
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(create, names))
        t_applied = time.monotonic() - t0
        reads0 = running.trainers.requests if running else 0
        deadline = time.monotonic() + args.timeout
        rss_peak_sampled = 0
        while time.monotonic() < deadline and not (
            len(jobsets.seen) >= args.count and len(statuses.seen) >= args.count
        ):
            rss_peak_sampled = max(rss_peak_sampled, op.rss_bytes())
            time.sleep(0.1)
        total = max([*jobsets.seen.values(), *statuses.seen.values()], default=t0) - t0
        cpu = cpu_seconds(op.pid) - cpu0
        if running:
            extra["burst_reads"] = running.trainers.requests - reads0
        if spy:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        peak_rss = op.peak_rss_bytes()
        create_count = op.metric("rljob_operator_reconcile_duration_seconds_count", handler="create")
        create_sum = op.metric("rljob_operator_reconcile_duration_seconds_sum", handler="create")
        load_after = load_average()
    finally:
        for w in (jobsets, statuses, probe):
            w.stop.set()
        try:
            if running:
                running.close()  # needs the operator (kopf's finalizer)
        finally:
            op.stop()
            for name in namespaces:
                kubectl("delete", "namespace", name, "--wait=false", check=False, timeout=180)

    to_jobset = [jobsets.seen[n] - applied[n] for n in names if n in jobsets.seen]
    to_status = [statuses.seen[n] - applied[n] for n in names if n in statuses.seen]
    if len(to_jobset) < args.count:
        print(f"only {len(to_jobset)}/{args.count} JobSets appeared within {args.timeout}s", file=sys.stderr)
    mib = 1024 * 1024
    result = {
        "date": datetime.date.today().isoformat(),
        "count": args.count,
        "creates_s": round(t_applied, 2),
        "jobset_p50": round(statistics.median(to_jobset), 2) if to_jobset else None,
        "jobset_p99": round(pct(to_jobset, 0.99), 2) if to_jobset else None,
        "jobset_max": round(max(to_jobset), 2) if to_jobset else None,
        "status_p50": round(statistics.median(to_status), 2) if to_status else None,
        "status_p99": round(pct(to_status, 0.99), 2) if to_status else None,
        "total_s": round(total, 2),
        "rss_idle_mib": round(rss_idle / mib),
        "rss_peak_mib": round(max(peak_rss, rss_peak_sampled) / mib),
        "operator_cpu_s": round(cpu, 1),
        "api_get_p50_ms": round(1000 * statistics.median(probe.samples)) if probe.samples else None,
        "handler_mean_ms": round(1000 * create_sum / create_count) if create_count else None,
        "load": f"{load_before} -> {load_after}",
        "jobsets": f"{len(to_jobset)}/{args.count}",
        "progress_interval_s": interval,
        "running": args.running,
        **extra,
    }
    if lag_file.exists():
        result.update(burst_running.lag_stats(str(lag_file), t0, t0 + max(total, t_applied)))
    for key, value in result.items():
        print(f"{key:>16}: {value}")
    print(f"goal p99 <= 2 s: {'met' if (result['jobset_p99'] or 1e9) <= 2 else 'MISSED'}; "
          f"goal RSS <= 200 MB: {'met' if max(peak_rss, rss_peak_sampled) <= 200e6 else 'MISSED'}")  # fmt: skip
    if args.profile:
        print(f"profile: {args.profile} (python -m pstats {args.profile}; sort cumtime; stats 30)")
    if args.record:
        row = (
            f"| {result['date']} | {args.count}{' suspended' if args.suspend else ''} | {result['creates_s']} "
            f"| {result['jobset_p50']} | {result['jobset_p99']} | {result['jobset_max']} "
            f"| {result['status_p50']} | {result['status_p99']} | {result['total_s']} "
            f"| {result['rss_idle_mib']} -> {result['rss_peak_mib']} | {result['operator_cpu_s']} "
            f"| {result['handler_mean_ms']} | {result['api_get_p50_ms']} "
            f"| {result['load']} | {args.note}{f' max-workers={args.max_workers}' if args.max_workers else ''}"
            f"{running_note(result)} |"
        )
        text = DOC.read_text()
        assert MARKER in text, f"{DOC} lacks the marker line"
        DOC.write_text(text.replace(MARKER, row + "\n" + MARKER))
        print(f"recorded in {DOC}")
    return 0 if len(to_jobset) == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
