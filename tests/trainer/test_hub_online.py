"""``hf://`` online, as a trainer pod sees it: ``HF_TOKEN``, ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` from the
environment of a fresh process (huggingface_hub reads them at import), against a private repo on a local
server that answers as the Hub does (tests/trainer/fake_hub.py; no Hub is reachable here).

* with the token: the tokenizer (with its chat template) is downloaded into ``HF_HUB_CACHE`` and used;
  every request carried the token;
* without it: exit 2 naming the field and saying to set ``HF_TOKEN`` (the Hub hides private repos);
* server gone, ``HF_HUB_OFFLINE=1``: the same start-up works from the cache alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.trainer import fake_hub
from tests.trainer.test_config_exits import ROOT, run_trainer
from tests.trainer.test_data_sources import TEMPLATE, tokenizer_dir
from tests.trainer.test_workload_exits import workload

TOKEN = "hf_rljob_test_token"
REPO = "acme/private-tok"
START = """
import json, sys
from rljob.api import load_rljob
from rljob_trainer.run import startup
print(json.dumps(startup.prepare(load_rljob(sys.argv[1])).data.prompts))
"""


def start_up(tmp_path: Path, doc: dict, env: dict[str, str]) -> list[str]:
    """``startup.prepare`` (what the trainer runs before JAX) in a fresh process; returns the prompts."""
    config = tmp_path / "rljob.yaml"
    config.write_text(yaml.safe_dump(doc))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    proc = subprocess.run(
        [sys.executable, "-c", START, str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**clean, "PYTHONPATH": f"{ROOT}:{ROOT / 'trainer'}", **env},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_private_repo_with_token_cache_and_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tokenizer_dir(tmp_path / "tok", TEMPLATE.replace("%s", "hub"), as_jinja=True)
    doc = workload(tmp_path, **{"model.tokenizerPath": f"hf://{REPO}", "maxPrefillPredictLength": 32})
    doc["spec"]["data"]["chatTemplate"] = True
    cache = tmp_path / "hub-cache"
    with fake_hub.serve(REPO, folder, TOKEN) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache), "HF_HUB_ETAG_TIMEOUT": "5"}
        for name, value in env.items():  # run_trainer passes this process's environment on
            monkeypatch.setenv(name, value)
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        refused = run_trainer(tmp_path, doc)
        assert refused.returncode == 2, refused.stderr
        assert f"spec.model.tokenizerPath: hf://{REPO}: " in refused.stderr
        assert "is HF_TOKEN set for a private repo?" in refused.stderr
        assert "Traceback" not in refused.stderr

        prompts = start_up(tmp_path, doc, {**env, "HF_TOKEN": TOKEN})
        assert prompts == ["[hub:user]emit a:"]  # the downloaded chat_template.jinja framed the prompt
        snapshot = cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / hub.commit
        assert sorted(p.name for p in snapshot.iterdir()) == sorted(p.name for p in folder.iterdir())
        served = [r for r in hub.requests if r[2] == f"Bearer {TOKEN}"]
        assert {m for m, _, _ in served} == {"GET", "HEAD"}
        assert any(path.endswith("/chat_template.jinja") for _, path, _ in served)

    # the server is gone: offline, the cache alone is enough
    prompts = start_up(tmp_path, doc, {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"})
    assert prompts == ["[hub:user]emit a:"]
