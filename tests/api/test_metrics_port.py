"""spec.metrics.port keeps off the ports of the TPU runtime and of the node agents (a host-network port).

The rule cases (9100, 10250, 10256 refused; 9101 accepted) are in cases.py, so the model, the CEL in the
CRD (test_cel.py) and a real apiserver (tests/e2e/test_reliability_cel.py) check them; here: what
`rljob validate` prints, and that the field's description (docs/api.md) names every refused port.
"""

from __future__ import annotations

import re

import yaml
from rljob_cli.main import main as cli_main

from rljob.api.rules import NODE_AGENT_PORTS
from rljob.api.spec import MetricsSpec
from rljob.api.tpu import RESERVED_TPU_PORTS
from tests.api.manifests import manifest


def test_validate_names_the_field_and_the_agent(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(manifest({"metrics": {"port": 9100}})))
    assert cli_main(["validate", "-f", str(bad)]) == 1
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "spec.metrics.port:" in x)
    assert "9100 (node-exporter)" in line, err
    assert "Traceback" not in err


def test_description_names_every_refused_port() -> None:
    described = {int(p) for p in re.findall(r"\b\d{4,5}\b", MetricsSpec.model_fields["port"].description)}
    assert set(NODE_AGENT_PORTS) | set(RESERVED_TPU_PORTS) <= described
