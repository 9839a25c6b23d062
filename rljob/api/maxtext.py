"""spec.model.maxtext: a MaxText model for ``spec.model.backend: maxtext``.

MaxText names its architectures (``configs/models/<name>.yml``: qwen3-8b, llama3.1-8b, gemma3-4b,
deepseek3-671b, gpt-oss-20b, ...) and takes everything else as config keys. ``overrides`` carries such
keys as strings, read the way MaxText reads ``key=value`` on its command line; the trainer checks the keys
against MaxText's config fields at startup (unknown ones exit 2 naming the key), because only the
trainer's image has MaxText installed.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from rljob.api.base import Model

BACKENDS = ("tunix", "maxtext")
MAXTEXT_SIZES = ("tiny", "full")
"""spec.model.size with backend maxtext: ``tiny`` shrinks the named architecture to the 2-layer random
demo decoder; ``full`` is the architecture as MaxText defines it."""


class MaxTextSpec(Model):
    """MaxText model name and config overrides (only with spec.model.backend maxtext)."""

    modelName: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
    """MaxText model name (MaxText's configs/models/<name>.yml), e.g. qwen3-8b, llama3.1-8b, gemma3-4b."""
    overrides: Annotated[dict[str, Annotated[str, Field(max_length=1024)]], Field(max_length=64)] = Field(
        default_factory=dict
    )
    """MaxText config overrides, key: value as on MaxText's command line (e.g. remat_policy: full).
    Keys are checked against MaxText's config when the trainer starts; keys rljob sets itself
    (model_name, load_parameters_path, max_target_length, ...) are refused."""
