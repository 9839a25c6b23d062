"""``rljob validate --check-files``: the trainer's start-up checks on local files, without JAX.

Without the option a manifest is checked by the CRD's rules only, so a checkpoint of another size is
"valid" and the trainer refuses it later; with it, validate refuses it the way the trainer does (exit 2,
the file and key named). Checkpoints: the ``transformers``-written fixtures of tests/trainer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from rljob_cli.main import main

from tests.trainer.manifests import tiny_rljob

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "trainer" / "fixtures" / "checkpoints"
DATA = ROOT / "examples" / "tiny" / "emit.jsonl"


def manifest(tmp_path: Path, checkpoint: Path, **model: str) -> str:
    doc = tiny_rljob(
        **{
            "model.family": checkpoint.name.split("-")[0],
            "model.checkpointPath": str(checkpoint),
            "data": {"source": str(DATA)},
            "rewards": [{"name": "answerCharFraction"}],
            **{f"model.{k}": v for k, v in model.items()},
        }
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_checkpoint_of_another_size_is_valid_but_refused_with_check_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = manifest(tmp_path, FIXTURES / "qwen2-untied", size="1.5b")
    assert run(["validate", "-f", path], capsys)[0] == 0
    code, _, err = run(["validate", "--check-files", "-f", path], capsys)
    assert code == 2
    assert "RLJob t cannot be trained:" in err
    assert f"spec.model.checkpointPath: {FIXTURES / 'qwen2-untied'}/config.json: hidden_size is 64" in err


def test_folder_without_tokenizer_is_refused_with_check_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "qwen3-tied"
    shutil.copytree(FIXTURES / "qwen3-tied", folder)
    (folder / "tokenizer.json").unlink()
    code, _, err = run(["validate", "--check-files", "-f", manifest(tmp_path, folder)], capsys)
    assert code == 2
    assert f"spec.model.checkpointPath: {folder} has no tokenizer files" in err


def test_good_checkpoint_and_data_pass_check_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        ["validate", "--check-files", "-f", manifest(tmp_path, FIXTURES / "llama3-tied")], capsys
    )
    assert code == 0
    assert "RLJob t is valid (local files checked)" in out


def test_missing_data_file_is_refused_with_check_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = manifest(tmp_path, FIXTURES / "llama3-tied")
    Path(path).write_text(Path(path).read_text().replace(str(DATA), str(tmp_path / "none.jsonl")))
    code, _, err = run(["validate", "--check-files", "-f", path], capsys)
    assert code == 2
    assert f"spec.data.source: {tmp_path / 'none.jsonl'} does not exist" in err
