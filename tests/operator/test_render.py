"""Properties of the renderer that goldens show but do not explain: slice math, placement, failure policy,
determinism, the name budget, and that the trainer config round-trips through the API model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rljob_operator import names
from rljob_operator.render import dump_yaml, render_objects

from rljob.api import load_rljob, parse_rljob
from rljob.api.rules import MAX_NAME_LENGTH
from tests.operator.builders import make_rljob

REPO = Path(__file__).resolve().parents[2]

# (accelerator, topology, chipsPerHost) -> (chips per host, hosts) from the reference table
TABLE = [
    ("tpu-v4-podslice", "2x2x1", None, 4, 1),
    ("tpu-v4-podslice", "2x2x4", None, 4, 4),
    ("tpu-v5-lite-podslice", "2x2", None, 4, 1),
    ("tpu-v5-lite-podslice", "2x4", 8, 8, 1),
    ("tpu-v5-lite-podslice", "2x4", None, 4, 2),
    ("tpu-v5-lite-podslice", "4x8", None, 4, 8),
    ("tpu-v5p-slice", "2x2x1", None, 4, 1),
    ("tpu-v5p-slice", "4x4x4", None, 4, 16),
    ("tpu-v6e-slice", "1x1", None, 1, 1),
    ("tpu-v6e-slice", "4x4", None, 4, 4),
    ("tpu-v6e-slice", "16x16", None, 4, 64),
    ("tpu7x", "2x2x2", None, 4, 2),
    ("tpu7x", "4x4x4", None, 4, 16),
]


def _jobset(builder):
    return render_objects(builder.obj())[1]


def _slice(js):
    return js["spec"]["replicatedJobs"][0]


def _pod(js):
    return _slice(js)["template"]["spec"]["template"]


@pytest.mark.parametrize(("acc", "topo", "cph", "chips", "hosts"), TABLE)
def test_slice_math_matches_reference_table(acc, topo, cph, chips, hosts):
    js = _jobset(make_rljob().tpu(acc, topo, cph))
    job = _slice(js)["template"]["spec"]
    assert (job["parallelism"], job["completions"]) == (hosts, hosts)
    res = _pod(js)["spec"]["containers"][0]["resources"]
    assert res["requests"] == res["limits"] == {"google.com/tpu": str(chips)}
    sel = _pod(js)["spec"]["nodeSelector"]
    assert sel[names.ACCELERATOR_LABEL] == acc and sel[names.TOPOLOGY_LABEL] == topo


@pytest.mark.parametrize(
    ("acc", "cph", "machine"),
    [
        ("tpu-v5-lite-podslice", None, "ct5lp-hightpu-4t"),
        ("tpu-v5-lite-podslice", 8, "ct5lp-hightpu-8t"),
        ("tpu-v6e-slice", 4, "ct6e-standard-4t"),
        ("tpu-v6e-slice", 8, "ct6e-standard-8t"),
    ],
)
def test_machine_type_selects_between_the_two_2x4_forms(acc, cph, machine):
    sel = _pod(_jobset(make_rljob().tpu(acc, "2x4", cph)))["spec"]["nodeSelector"]
    assert sel[names.INSTANCE_TYPE_LABEL] == machine


def test_machine_type_only_where_ambiguous():
    sel = _pod(_jobset(make_rljob().tpu("tpu-v6e-slice", "4x4")))["spec"]["nodeSelector"]
    assert names.INSTANCE_TYPE_LABEL not in sel


def test_multislice_one_job_per_slice_on_its_own_pool():
    js = _jobset(make_rljob().tpu("tpu-v6e-slice", "4x4").slices(3))
    assert _slice(js)["replicas"] == 3
    assert js["metadata"]["annotations"] == {names.EXCLUSIVE_TOPOLOGY: names.NODEPOOL_LABEL}


@pytest.mark.parametrize(
    ("acc", "topo", "slices", "exclusive"),
    [
        ("tpu-v6e-slice", "4x4", 1, True),  # 4 hosts: the slice owns its pool
        ("tpu-v6e-slice", "4x4", 2, True),
        ("tpu-v5-lite-podslice", "2x2", 1, False),  # one host: a single-host pool serves several RLJobs
        ("tpu-v6e-slice", "1x1", 1, False),
        ("tpu-v5p-slice", "2x2x1", 1, False),
    ],
)
def test_exclusive_placement_only_for_multi_host_or_multislice(acc, topo, slices, exclusive):
    js = _jobset(make_rljob().tpu(acc, topo).slices(slices))
    assert (names.EXCLUSIVE_TOPOLOGY in (js["metadata"].get("annotations") or {})) is exclusive


def test_trainer_keeps_the_image_entrypoint():
    """``args`` only: the image's ENTRYPOINT (tini, then the trainer) stays, so SIGTERM reaches Python."""
    c = _pod(_jobset(make_rljob()))["spec"]["containers"][0]
    assert "command" not in c and c["args"] == ["--config", "/etc/rljob/rljob.yaml"]
    dockerfile = (Path(__file__).parents[2] / "Dockerfile").read_text()
    trainer_stage = dockerfile.split("AS trainer\n", 1)[1].split("\nFROM ", 1)[0]
    assert 'ENTRYPOINT ["tini", "--", "python", "-m", "rljob_trainer"]' in trainer_stage


def test_failure_policy():
    js = _jobset(make_rljob().max_restarts(7))
    fp = js["spec"]["failurePolicy"]
    assert fp["maxRestarts"] == 7
    actions = [(r["action"], r["onJobFailureReasons"]) for r in fp["rules"]]
    assert actions == [
        ("RestartJobSetAndIgnoreMaxRestarts", ["PodFailurePolicy"]),
        ("FailJobSet", ["PodFailurePolicy"]),
    ]
    job = _slice(js)["template"]["spec"]
    assert job["backoffLimit"] == 0 and job["completionMode"] == "Indexed"
    rules = job["podFailurePolicy"]["rules"]
    assert rules[0]["onPodConditions"][0]["type"] == "DisruptionTarget"
    assert rules[1]["onExitCodes"] == {"containerName": "trainer", "operator": "In", "values": [2]}
    assert _pod(js)["spec"]["restartPolicy"] == "Never"


def test_pod_template_basics():
    js = _jobset(make_rljob("abc").metrics_port(9200).pod_annotation("k", "v").priority_class("p"))
    pod = _pod(js)
    spec, c = pod["spec"], pod["spec"]["containers"][0]
    assert pod["metadata"]["labels"] == {"rljob.dev/name": "abc", "rljob.dev/role": "trainer"}
    assert pod["metadata"]["annotations"] == {"k": "v"}
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists"}]
    assert spec["priorityClassName"] == "p"
    assert c["ports"] == [{"name": "metrics", "containerPort": 9200, "protocol": "TCP"}]
    env = {e["name"]: e for e in c["env"]}
    assert env["RLJOB_METRICS_PORT"]["value"] == "9200"
    for var, label in [
        ("JOBSET_NAME", "jobset.sigs.k8s.io/jobset-name"),
        ("REPLICATED_JOB_NAME", "jobset.sigs.k8s.io/replicatedjob-name"),
        ("JOB_INDEX", "jobset.sigs.k8s.io/job-index"),
        ("POD_INDEX", "batch.kubernetes.io/job-completion-index"),
    ]:
        assert env[var]["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{label}']"
    assert "JAX_COORDINATOR_ADDRESS" not in env
    assert spec["volumes"][0]["configMap"]["name"] == "abc-config"


def test_host_network_is_optional_for_autopilot():
    """spec.hostNetwork false: the pod network (GKE Autopilot refuses host-network pods unless
    allowlisted); the rest of the pod is unchanged and nothing is privileged."""
    on = _pod(_jobset(make_rljob("abc")))["spec"]
    off = _pod(_jobset(make_rljob("abc").set("spec.hostNetwork", False)))["spec"]
    assert "hostNetwork" not in off and "dnsPolicy" not in off
    assert {k: v for k, v in on.items() if k not in ("hostNetwork", "dnsPolicy")} == off
    assert "securityContext" not in off["containers"][0]  # the chart's default: none


def test_jobset_level_settings():
    js = _jobset(make_rljob("q").queue("lq").ttl(99))
    assert js["metadata"]["name"] == "q"
    assert js["metadata"]["labels"][names.QUEUE_LABEL] == "lq"
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert js["spec"]["successPolicy"] == {"operator": "All"}
    assert js["spec"]["ttlSecondsAfterFinished"] == 99
    assert js["spec"]["suspend"] is True, "a queued JobSet starts suspended until Kueue admits it"
    assert _jobset(make_rljob())["spec"]["suspend"] is False
    assert _jobset(make_rljob().suspend())["spec"]["suspend"] is True
    held = _jobset(make_rljob("q").queue("lq").suspend())
    assert held["spec"]["suspend"] is True
    assert names.QUEUE_LABEL not in held["metadata"]["labels"], "Kueue would admit and start it"


def test_trainer_config_round_trips_through_the_model():
    job = make_rljob("rt").vllm(64).packing(512).obj()
    cm = render_objects(job)[0]
    assert cm["metadata"]["name"] == "rt-config"
    back = parse_rljob(yaml.safe_load(cm["data"]["rljob.yaml"]))
    assert back.spec == job.spec
    assert back.status is None


def test_config_ignores_server_metadata_and_status():
    """What the apiserver adds (uid, kopf annotations, status) must not leak into the trainer config."""
    m = make_rljob("srv").status(phase="Running").manifest()
    m["metadata"].update(uid="u-1", resourceVersion="7", annotations={"rljob.dev/last-handled": "x"})
    plain = render_objects(make_rljob("srv").obj())
    assert render_objects(parse_rljob(m)) == plain


def test_vllm_block_size_only_when_set():
    cfg = lambda b: render_objects(b.obj())[0]["data"]["rljob.yaml"]  # noqa: E731
    assert "vllmBlockSize: 32" in cfg(make_rljob().vllm(32))
    assert "vllmBlockSize" not in cfg(make_rljob().vllm())


def test_deterministic():
    b = (
        make_rljob("d")
        .tpu("tpu-v6e-slice", "4x4")
        .slices(2)
        .pod_annotation("z", "1")
        .pod_annotation("a", "2")
    )
    assert dump_yaml(render_objects(b.obj())) == dump_yaml(render_objects(b.obj()))


def test_longest_pod_name_fits():
    """JobSet pod names are <js>-<rjob>-<jobIdx>-<podIdx>-<5 random>; with the longest RLJob name, the
    largest slice count the API allows and the largest slice, it must stay within 63."""
    name = "a" * MAX_NAME_LENGTH
    js = _jobset(make_rljob(name).tpu("tpu-v5p-slice", "16x16x24").slices(256))
    slices, hosts = _slice(js)["replicas"], _slice(js)["template"]["spec"]["completions"]
    pod = f"{js['metadata']['name']}-{_slice(js)['name']}-{slices - 1}-{hosts - 1}-xxxxx"
    assert len(pod) <= 63, pod


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("rljob-*.yaml")))
def test_examples_validate_and_render(path):
    job = load_rljob(path)
    assert len(render_objects(job)) == 2


def test_operator_never_imports_jax():
    code = (
        "import sys; import rljob_operator.render, rljob_operator.status, rljob_operator.main, "
        "rljob_operator.handlers, rljob_operator.reconcile, rljob_operator.kube; "
        "bad = [m for m in ('jax', 'tunix', 'jaxlib') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    env_path = f"{REPO}:{REPO / 'operator'}"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": env_path},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_trainer_security_context_comes_from_the_operator_options() -> None:
    from rljob_operator.main import build_parser, options_from
    from rljob_operator.render import render_jobset

    job = make_rljob("sec").obj()

    def container(js: dict) -> dict:
        return js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]

    assert "securityContext" not in container(render_jobset(job))
    options = options_from(build_parser().parse_args(["--trainer-security-context", '{"privileged": true}']))
    assert container(render_jobset(job, options.render))["securityContext"] == {"privileged": True}


def test_grace_period_reaches_the_pods() -> None:
    from rljob_operator.render import render_jobset

    job = make_rljob("grace").obj()
    pod = render_jobset(job)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == job.spec.terminationGracePeriodSeconds == 300


@pytest.mark.parametrize("engine", ["vanilla", "vllm"])
@pytest.mark.parametrize("slices", [1, 2])
def test_operator_env_names_are_reserved_in_the_api(engine: str, slices: int) -> None:
    """``spec.env`` may not redefine what the operator sets, for any engine or topology: the API's
    reserved names and prefixes cover every name it renders."""
    from rljob.api.pod import RESERVED_ENV, RESERVED_ENV_PREFIXES, VLLM_ENV

    job = make_rljob().tpu("tpu-v6e-slice", "4x4").slices(slices)
    reserved = set(RESERVED_ENV)
    if engine == "vllm":
        job = job.vllm()
        reserved |= set(VLLM_ENV)
        assert set(VLLM_ENV) <= {e["name"] for e in _pod(_jobset(job))["spec"]["containers"][0]["env"]}
    env = _pod(_jobset(job))["spec"]["containers"][0]["env"]
    assert all(e["name"] in reserved or e["name"].startswith(RESERVED_ENV_PREFIXES) for e in env)


def test_shm_always_mounted_and_gcsfuse_annotated_only_with_its_driver():
    plain = _pod(_jobset(make_rljob()))
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in plain["spec"]["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in plain["spec"]["containers"][0]["volumeMounts"]
    assert "annotations" not in plain["metadata"]
    pvc = make_rljob().set("spec.volumes", [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}])
    assert "annotations" not in _pod(_jobset(pvc))["metadata"]
    gcs = make_rljob().set("spec.volumes", [{"name": "d", "csi": {"driver": "gcsfuse.csi.storage.gke.io"}}])
    assert _pod(_jobset(gcs))["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
