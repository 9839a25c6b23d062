"""Model, tokenizer and dataset sources -> local files: a local path, ``gs://`` or ``hf://`` (rljob/api/workload.py).

Why here and not in each loader: every consumer (Tunix's safetensors loader, the tokenizer, ``datasets``)
reads local files, so a source is fetched once, up front, before JAX is imported, and two failure kinds are
told apart for the JobSet's failure policy:

* ``RLJobError`` (exit 2): the source cannot work whatever happens (no such repo, revision, bucket or
  object, offline with nothing cached, access denied). The message names the spec field.
* ``SourceUnavailable`` (exit 1, retryable): the network or the server failed (connection refused, a 5xx,
  a timeout). The message names the source.

Clients and their settings: ``huggingface_hub.snapshot_download`` honours ``HF_TOKEN``, ``HF_HUB_OFFLINE``
and ``HF_HUB_CACHE``/``HF_HOME`` itself; ``google-cloud-storage`` honours ``STORAGE_EMULATOR_HOST`` (a
GCS-compatible server such as fake-gcs-server; then credentials are anonymous). Bucket objects are copied
under ``RLJOB_CACHE_DIR`` (default ``~/.cache/rljob``) and re-used when their size and generation match
(recorded in a separate ``gcs-generations`` tree, so a copied folder holds only the bucket's objects).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rljob.api import RLJobError

if TYPE_CHECKING:
    from google.cloud import storage

HF = "hf://"
GS = "gs://"
MODEL_FILES = ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "tokenizer*")
"""What a model snapshot needs: config, weights, tokenizer and chat template (not other formats' weights)."""
RETRY_SECONDS = float(os.environ.get("RLJOB_SOURCE_RETRY_SECONDS", "60"))
"""How long a bucket download retries transient errors before it reports the source unavailable."""


class SourceUnavailable(Exception):
    """A source could not be reached now; retrying later may work (exit 1)."""


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    revision: str | None
    repo_type: str  # "model" | "dataset"


def kind(uri: str) -> str:
    """``hf``, ``gs`` or ``local``."""
    return "hf" if uri.startswith(HF) else "gs" if uri.startswith(GS) else "local"


def parse_hub(uri: str) -> HubRef:
    """``hf://org/repo[@rev]`` or ``hf://datasets/[org/]name[@rev]`` (the API pattern checked the form)."""
    rest = uri[len(HF) :]
    repo_type = "model"
    if rest.startswith("datasets/"):
        repo_type, rest = "dataset", rest[len("datasets/") :]
    repo_id, _, revision = rest.partition("@")
    return HubRef(repo_id, revision or None, repo_type)


def parse_bucket(uri: str) -> tuple[str, str]:
    """``gs://bucket/path`` -> (bucket, path without a trailing slash)."""
    bucket, _, path = uri[len(GS) :].partition("/")
    return bucket, path.rstrip("/")


def check_local(path: str, field: str, want: str = "any") -> list[str]:
    """Start-up check of a local source, as ``path: message`` lines (``want``: file, dir or any)."""
    p = Path(path)
    if not p.exists():
        return [f"{field}: {path} does not exist (relative paths are relative to {os.getcwd()})"]
    if want == "dir" and not p.is_dir():
        return [f"{field}: {path} is not a directory"]
    return []


def fetch(uri: str, field: str, files: tuple[str, ...] | None = None) -> Path:
    """The local path holding ``uri``'s files (downloaded when remote). Raises RLJobError/SourceUnavailable."""
    source = kind(uri)
    if source == "local":
        errors = check_local(uri, field)
        if errors:
            raise RLJobError(errors)
        return Path(uri)
    if source == "hf":
        return _fetch_hub(parse_hub(uri), uri, field, files)
    return _fetch_bucket(uri, field)


def _fetch_hub(ref: HubRef, uri: str, field: str, files: tuple[str, ...] | None) -> Path:
    from huggingface_hub import constants as hf_constants
    from huggingface_hub import errors as hf_errors
    from huggingface_hub import snapshot_download

    # HF_HUB_OFFLINE as the library reads it. Passed on as local_files_only: without it, a commit-hash
    # revision skips the offline check and asks the Hub for the file list (huggingface_hub 1.x).
    offline = hf_constants.is_offline_mode()
    try:
        return Path(
            snapshot_download(
                ref.repo_id,
                revision=ref.revision,
                repo_type=ref.repo_type,
                allow_patterns=list(files or ["*"]),
                local_files_only=offline,
            )
        )
    except (hf_errors.RepositoryNotFoundError, hf_errors.GatedRepoError) as exc:
        raise RLJobError(
            [f"{field}: {uri}: {_first_line(exc)} (is HF_TOKEN set for a private repo?)"]
        ) from None
    except hf_errors.RevisionNotFoundError as exc:
        raise RLJobError([f"{field}: {uri}: no such revision ({_first_line(exc)})"]) from None
    except hf_errors.LocalEntryNotFoundError as exc:
        if offline:
            raise RLJobError([f"{field}: {uri}: not in the Hub cache and HF_HUB_OFFLINE is set"]) from None
        raise SourceUnavailable(f"{field}: cannot download {uri}: {_first_line(exc)}") from None
    except (hf_errors.HfHubHTTPError, OSError) as exc:
        raise SourceUnavailable(f"{field}: cannot download {uri}: {_first_line(exc)}") from None


def storage_client() -> storage.Client:
    """A google-cloud-storage client; anonymous against an emulator (STORAGE_EMULATOR_HOST). Imported here,
    not at the top, so a run without gs:// paths never loads google-cloud-storage."""
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="rljob", credentials=AnonymousCredentials())
    return storage.Client()


def point_tensorstore_at_emulator() -> None:
    """With ``STORAGE_EMULATOR_HOST`` set, send TensorStore (Orbax's array writer) to the same server.

    google-cloud-storage and gcsfs (Orbax's file layer) read ``STORAGE_EMULATOR_HOST`` themselves;
    TensorStore's gcs kvstore reads ``TENSORSTORE_GCS_HTTP_URL`` and, without Google credentials (an
    emulator takes none), ``GOOGLE_AUTH_TOKEN_FOR_TESTING``. Settings already present are kept. gcsfs also
    logs a warning per path that it cannot look up the bucket type without credentials: silenced here.
    """
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if not host:
        return
    import logging

    os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", host if "://" in host else f"http://{host}")
    os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
    logging.getLogger("gcsfs").setLevel(logging.ERROR)


def _fetch_bucket(uri: str, field: str) -> Path:
    """Copy one object, or every object under a prefix, into the cache; returns the file or directory."""
    from google.api_core import exceptions as gexc
    from google.api_core.retry import Retry
    from google.auth import exceptions as auth_exc

    bucket_name, path = parse_bucket(uri)
    cache = Path(os.environ.get("RLJOB_CACHE_DIR", Path.home() / ".cache" / "rljob"))
    root = cache / "gcs" / bucket_name
    stamps = cache / "gcs-generations" / bucket_name  # beside, not in, the copy: readers see only the objects
    retry = Retry(timeout=RETRY_SECONDS)
    try:
        client = storage_client()
        blobs = [
            b for b in client.list_blobs(bucket_name, prefix=path, retry=retry) if not b.name.endswith("/")
        ]
        single = [b for b in blobs if b.name == path]
        chosen = single or [b for b in blobs if b.name.startswith(path + "/") or not path]
        if not chosen:
            raise RLJobError([f"{field}: {uri}: no objects there"])
        for blob in chosen:
            target = root / blob.name
            stamp = stamps / blob.name
            if target.exists() and stamp.exists() and stamp.read_text() == f"{blob.generation}:{blob.size}":
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            stamp.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target), retry=retry)
            stamp.write_text(f"{blob.generation}:{blob.size}")
    except RLJobError:
        raise
    except (gexc.NotFound, gexc.Forbidden, gexc.Unauthorized) as exc:
        raise RLJobError([f"{field}: {uri}: {_first_line(exc)}"]) from None
    except auth_exc.DefaultCredentialsError as exc:
        raise RLJobError([f"{field}: {uri}: no Google credentials ({_first_line(exc)})"]) from None
    except (gexc.GoogleAPIError, auth_exc.GoogleAuthError, OSError, ValueError) as exc:
        raise SourceUnavailable(f"{field}: cannot download {uri}: {_first_line(exc)}") from None
    except Exception as exc:  # requests' connection errors and the like: the network, not the config
        if type(exc).__module__.startswith(("requests", "urllib3")):
            raise SourceUnavailable(f"{field}: cannot download {uri}: {_first_line(exc)}") from None
        raise
    return root / path if path else root


def _first_line(exc: BaseException) -> str:
    text = re.sub(r"\s+", " ", str(exc)).strip()
    return (text or type(exc).__name__)[:300]
