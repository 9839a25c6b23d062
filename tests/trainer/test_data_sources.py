"""spec.data and the tokenizer through the trainer's real start-up (``startup.prepare``: source fetch,
``datasets``, the Hugging Face tokenizer), from every kind of source the API accepts:

* local JSONL and Parquet files, and a directory of split files (``split`` picks one);
* ``hf://datasets/<org>/<name>[@revision]``: a Hub dataset snapshot (README-declared configs and splits,
  as GSM8K publishes them) in a ``huggingface_hub`` cache with ``HF_HUB_OFFLINE=1``, two revisions;
* ``gs://``: a Parquet object and a prefix of JSONL files on fake-gcs-server.

Also what is done with the rows: shuffled by ``spec.grpo.seed``, capped after shuffling, the prompt framed
with the system prompt and the chat template of the tokenizer in use, which is the checkpoint's own unless
``tokenizerPath`` overrides it.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from rljob.api import parse_rljob
from tests.trainer import hf_checkpoint
from tests.trainer.gcs import GcsServer
from tests.trainer.manifests import tiny_rljob

TINY = hf_checkpoint.ROOT / "examples" / "tiny"


def rows(tag: str, n: int = 20) -> list[dict[str, Any]]:
    """GSM8K-shaped rows: a question, a "#### N" answer and one more column the rewards may read."""
    return [{"question": f"{tag} q{i}?", "answer": f"#### {i}", "level": i % 3} for i in range(n)]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_parquet(path: Path, records: list[dict[str, Any]]) -> Path:
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(records).to_parquet(str(path))
    return path


def prepare(source: str, seed: int = 0, model: dict[str, Any] | None = None, **data: Any) -> Any:
    """``startup.prepare`` of a tiny RLJob reading ``source`` (question/answer columns)."""
    from rljob_trainer.run import startup

    doc = tiny_rljob(
        **{
            "model": {"family": "qwen3", "size": "tiny", "tokenizerPath": str(TINY / "tokenizer.json")}
            | (model or {}),
            "data": {"source": source, "promptField": "question", "answerField": "answer", **data},
            "rewards": [{"name": "mathAnswer"}],
            "grpo.seed": seed,
            "grpo.batchSize": 4,
            "maxPrefillPredictLength": 40,
            "maxTargetLength": 64,
        }
    )
    return startup.prepare(parse_rljob(doc))


def test_jsonl_and_parquet_files_give_the_same_examples(tmp_path: Path) -> None:
    records = rows("file")
    jsonl = prepare(str(write_jsonl(tmp_path / "train.jsonl", records))).data
    parquet = prepare(str(write_parquet(tmp_path / "train.parquet", records))).data
    assert sorted(jsonl.prompts) == sorted(r["question"] for r in records)
    assert (jsonl.prompts, jsonl.columns) == (parquet.prompts, parquet.columns)
    assert set(jsonl.columns) == {"answer", "level"}  # the prompt column is not passed to the rewards again
    by_prompt = dict(zip(jsonl.prompts, jsonl.columns["answer"], strict=True))
    assert by_prompt["file q7?"] == "#### 7"  # columns stay aligned with their prompt after shuffling


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_split_picks_the_files_of_that_split_in_a_directory(tmp_path: Path, fmt: str) -> None:
    write = write_jsonl if fmt == "jsonl" else write_parquet
    write(tmp_path / "gsm" / f"train.{fmt}", rows("train"))
    write(tmp_path / "gsm" / f"test.{fmt}", rows("test", 7))
    test = prepare(str(tmp_path / "gsm"), split="test").data
    assert sorted(test.prompts) == sorted(r["question"] for r in rows("test", 7))
    train = prepare(str(tmp_path / "gsm")).data
    assert sorted(train.prompts) == sorted(r["question"] for r in rows("train"))


def test_unknown_split_names_the_field(tmp_path: Path) -> None:
    from rljob import api

    write_jsonl(tmp_path / "gsm" / "train.jsonl", rows("train"))
    with pytest.raises(api.RLJobError) as err:
        prepare(str(tmp_path / "gsm"), split="validation")
    assert err.value.errors[0].startswith("spec.data.split: 'validation'"), err.value.errors


def test_shuffled_by_the_seed_and_capped_after_shuffling(tmp_path: Path) -> None:
    source = str(write_jsonl(tmp_path / "train.jsonl", rows("s", 50)))
    one, again, other = (prepare(source, seed).data.prompts for seed in (1, 1, 2))
    assert one == again  # the same seed, the same order (a restarted run needs it)
    assert one != other and sorted(one) == sorted(other)
    assert one != sorted(one)  # shuffled, not file order
    capped = prepare(source, 1, maxExamples=5).data
    assert capped.prompts == one[:5]  # the cap takes the first examples of the shuffled order
    assert capped.columns["answer"] == prepare(source, 1).data.columns["answer"][:5]


def test_system_prompt_and_chat_template_frame_every_prompt(tmp_path: Path) -> None:
    source = str(write_jsonl(tmp_path / "train.jsonl", rows("f", 3)))
    plain = prepare(source, systemPrompt="Be brief.").data.prompts
    assert sorted(plain) == [f"Be brief.\n\nf q{i}?" for i in range(3)]
    # examples/tiny/tokenizer_config.json's template: the system message, a newline, the user message
    chat = prepare(source, systemPrompt="Be brief.", chatTemplate=True).data.prompts
    assert sorted(chat) == [f"Be brief.\nf q{i}?" for i in range(3)]
    assert sorted(prepare(source, chatTemplate=True).data.prompts) == [f"f q{i}?" for i in range(3)]


def tokenizer_dir(out: Path, template: str, as_jinja: bool) -> Path:
    """The tiny tokenizer with another chat template, in tokenizer_config.json or chat_template.jinja (the
    file newer Hub repos such as Qwen3's publish)."""
    out.mkdir(parents=True)
    shutil.copy(TINY / "tokenizer.json", out / "tokenizer.json")
    config = json.loads((TINY / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    if as_jinja:
        (out / "chat_template.jinja").write_text(template)
    else:
        config["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


TEMPLATE = "{% for m in messages %}[%s:{{ m['role'] }}]{{ m['content'] }}{% endfor %}"


def test_tokenizer_is_the_checkpoints_own_unless_tokenizer_path_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants as hf_constants

    checkpoint = hf_checkpoint.write_checkpoint("qwen3", hf_checkpoint.tiny_model("qwen3"), tmp_path / "ckpt")
    shutil.copytree(
        tokenizer_dir(tmp_path / "own", TEMPLATE.replace("%s", "own"), False), checkpoint, dirs_exist_ok=True
    )
    source = str(write_jsonl(tmp_path / "train.jsonl", rows("t", 2)))
    own = prepare(source, model={"checkpointPath": str(checkpoint), "tokenizerPath": None}, chatTemplate=True)
    assert sorted(own.data.prompts) == ["[own:user]t q0?", "[own:user]t q1?"]

    # the override from the Hub (offline cache), its template in chat_template.jinja
    override = tokenizer_dir(tmp_path / "override", TEMPLATE.replace("%s", "override"), True)
    cache = tmp_path / "hub"
    hf_checkpoint.hub_cache(override, cache, "acme/tok")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    other = prepare(
        source,
        model={"checkpointPath": str(checkpoint), "tokenizerPath": "hf://acme/tok"},
        chatTemplate=True,
        systemPrompt="S",
    )
    assert sorted(other.data.prompts) == [f"[override:system]S[override:user]t q{i}?" for i in range(2)]


def hub_dataset(cache: Path, repo_id: str, tag: str) -> str:
    """A GSM8K-shaped Hub dataset snapshot (configs ``main`` and ``other``, parquet splits declared in the
    README as the Hub publishes them) put in the Hub cache as revision ``tag``; returns its commit."""
    snapshot = cache.parent / "src" / tag
    write_parquet(snapshot / "main" / "train-00000-of-00001.parquet", rows(f"{tag} main-train"))
    write_parquet(snapshot / "main" / "test-00000-of-00001.parquet", rows(f"{tag} main-test", 5))
    write_parquet(snapshot / "other" / "train-00000-of-00001.parquet", rows(f"{tag} other-train", 3))
    (snapshot / "README.md").write_text(
        "---\nconfigs:\n"
        "- config_name: main\n  data_files:\n"
        "  - split: train\n    path: main/train-*\n  - split: test\n    path: main/test-*\n"
        "- config_name: other\n  data_files:\n  - split: train\n    path: other/train-*\n---\n"
    )
    return hf_checkpoint.hub_cache(snapshot, cache, repo_id, revision=tag, repo_type="dataset")


def test_hub_dataset_revision_config_and_split_from_the_offline_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants as hf_constants

    cache = tmp_path / "hub"
    old = hub_dataset(cache, "acme/gsm", "v1")
    hub_dataset(cache, "acme/gsm", "main")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    latest = prepare("hf://datasets/acme/gsm", config="main", split="test").data.prompts
    assert sorted(latest) == sorted(r["question"] for r in rows("main main-test", 5))
    tagged = prepare("hf://datasets/acme/gsm@v1", config="other").data.prompts
    assert sorted(tagged) == sorted(r["question"] for r in rows("v1 other-train", 3))
    by_commit = prepare(f"hf://datasets/acme/gsm@{old}", config="main").data.prompts
    assert sorted(by_commit) == sorted(r["question"] for r in rows("v1 main-train"))


def test_bucket_parquet_object_and_jsonl_prefix(gcs: GcsServer, tmp_path: Path) -> None:
    parquet = gcs.upload_file(
        write_parquet(tmp_path / "p.parquet", rows("gs")), "data", "gsm/main/train-00000.parquet"
    )
    assert sorted(prepare(parquet).data.prompts) == sorted(r["question"] for r in rows("gs"))
    write_jsonl(tmp_path / "dir" / "train-0.jsonl", rows("part0", 4))
    write_jsonl(tmp_path / "dir" / "train-1.jsonl", rows("part1", 4))
    prefix = gcs.upload_dir(tmp_path / "dir", "data", "jsonl")
    got = prepare(prefix).data.prompts
    assert sorted(got) == sorted(r["question"] for r in rows("part0", 4) + rows("part1", 4))
    assert sorted(prepare(prefix).data.prompts) == sorted(got)  # a second start reads the cached copy


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_empty_dataset_names_the_source(tmp_path: Path, fmt: str) -> None:
    from rljob import api

    path = tmp_path / f"train.{fmt}"
    if fmt == "jsonl":
        path.write_text("")
    else:  # the columns, no rows
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(
            pa.table({"question": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), path
        )
    with pytest.raises(api.RLJobError) as err:
        prepare(str(path))
    assert err.value.errors == [f"spec.data.source: the dataset has no examples ({path})"]


def test_built_in_dataset_needs_no_pickling_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's built-in data is made without datasets' dill fingerprint: on the TPU host (its own
    pyarrow) that hash raised ``Can't pickle <class 'MonthDayNano'>`` and every run without spec.data
    crashed at start (docs/tpu.md). Here the hash raises as it did there."""
    from datasets import arrow_dataset, fingerprint
    from rljob_trainer.workload import data

    def refuse(*args: object, **kwargs: object) -> str:
        raise pickle.PicklingError(
            "Can't pickle <class 'MonthDayNano'>: it's not found as builtins.MonthDayNano"
        )

    monkeypatch.setattr(fingerprint.Hasher, "hash", classmethod(refuse))
    monkeypatch.setattr(arrow_dataset, "generate_fingerprint", refuse)
    ds = data.emit_dataset()
    assert len(ds) == data.EMIT_EXAMPLES and ds[0] == {"prompt": "emit a:", "answer": "a"}
