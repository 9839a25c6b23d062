"""RLJob test cases of the slice (``spec.tpu``: topology per generation, chips per host, multislice), a
passing and a failing edit for each rule of ``rljob/api/tpu_rules.py``; ``cases.py`` gathers them."""

from __future__ import annotations

from typing import Any

from tests.api.manifests import manifest

# (id, manifest, the field path the error must name, or None when the manifest is valid)
TPU_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("v5e 2D topology", manifest({"tpu": {"topology": "4x8"}}), None),
    ("v5e 3D topology", manifest({"tpu": {"topology": "2x2x2"}}), "spec.tpu.topology"),
    ("v5e unknown topology", manifest({"tpu": {"topology": "3x3"}}), "spec.tpu.topology"),
    ("v4 3D topology", manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "2x2x4"}}), None),
    (
        "v4 2D topology",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "2x4"}}),
        "spec.tpu.topology",
    ),
    ("v5p 16x16x24", manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "16x16x24"}}), None),
    ("v5p 2x4", manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "2x4"}}), "spec.tpu.topology"),
    ("v7x 2x2x2", manifest({"tpu": {"accelerator": "tpu7x", "topology": "2x2x2"}}), None),
    ("v7x 16x16x24", manifest({"tpu": {"accelerator": "tpu7x", "topology": "16x16x24"}}), None),
    (
        "v7x 16x24x32 over the pod",
        manifest({"tpu": {"accelerator": "tpu7x", "topology": "16x24x32"}}),
        "spec.tpu.topology",
    ),
    ("v7x 1x1x1", manifest({"tpu": {"accelerator": "tpu7x", "topology": "1x1x1"}}), None),
    (
        "v7x 1x1x1 with 1 chip",
        manifest({"tpu": {"accelerator": "tpu7x", "topology": "1x1x1", "chipsPerHost": 1}}),
        None,
    ),
    ("v5p 12x12x12", manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "12x12x12"}}), None),
    ("v5p 4x4x12", manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "4x4x12"}}), None),
    (
        "v5p 1x1x1",
        manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "1x1x1"}}),
        "spec.tpu.topology",
    ),
    ("v4 8x8x12", manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "8x8x12"}}), None),
    ("v4 4x4x12", manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "4x4x12"}}), None),
    ("v7x 4x4x12", manifest({"tpu": {"accelerator": "tpu7x", "topology": "4x4x12"}}), None),
    ("v7x 8x8x12", manifest({"tpu": {"accelerator": "tpu7x", "topology": "8x8x12"}}), None),
    ("v7x 16x16x16", manifest({"tpu": {"accelerator": "tpu7x", "topology": "16x16x16"}}), None),
    (
        "v4 4x4x6 not a cube multiple",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "4x4x6"}}),
        "spec.tpu.topology",
    ),
    (
        "v4 8x4x4 out of order",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "8x4x4"}}),
        "spec.tpu.topology",
    ),
    (
        "v4 04x4x4 leading zero",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "04x4x4"}}),
        "spec.tpu.topology",
    ),
    (
        "v4 16x16x20 over the pod",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "16x16x20"}}),
        "spec.tpu.topology",
    ),
    (
        "multislice v5p 4x4x12",
        manifest({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "4x4x12", "slices": 2}}),
        None,
    ),
    (
        "multislice v7x 1x1x1",
        manifest({"tpu": {"accelerator": "tpu7x", "topology": "1x1x1", "slices": 2}}),
        "spec.tpu.slices",
    ),
    ("v6e 16x16", manifest({"tpu": {"accelerator": "tpu-v6e-slice", "topology": "16x16"}}), None),
    (
        "v6e 2x2x1",
        manifest({"tpu": {"accelerator": "tpu-v6e-slice", "topology": "2x2x1"}}),
        "spec.tpu.topology",
    ),
    ("topology not AxB", manifest({"tpu": {"topology": "2by4"}}), "spec.tpu.topology"),
    ("unknown accelerator", manifest({"tpu": {"accelerator": "tpu-v9"}}), "spec.tpu.accelerator"),
    ("8-chip host on v5e 2x4", manifest({"tpu": {"chipsPerHost": 8}}), None),
    ("4-chip hosts on v5e 2x4", manifest({"tpu": {"chipsPerHost": 4}}), None),
    (
        "8-chip host on 4x4",
        manifest({"tpu": {"topology": "4x4", "chipsPerHost": 8}}),
        "spec.tpu.chipsPerHost",
    ),
    (
        "8-chip host on v4",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "2x2x2", "chipsPerHost": 8}}),
        "spec.tpu.chipsPerHost",
    ),
    ("1 chip on 1x1", manifest({"tpu": {"topology": "1x1", "chipsPerHost": 1}}), None),
    ("1 chip on 2x2", manifest({"tpu": {"topology": "2x2", "chipsPerHost": 1}}), "spec.tpu.chipsPerHost"),
    ("multislice multi-host", manifest({"tpu": {"slices": 4}}), None),
    ("multislice single-host 2x2", manifest({"tpu": {"topology": "2x2", "slices": 2}}), "spec.tpu.slices"),
    ("multislice 8-chip host", manifest({"tpu": {"chipsPerHost": 8, "slices": 2}}), "spec.tpu.slices"),
    (
        "multislice v4 2x2x1",
        manifest({"tpu": {"accelerator": "tpu-v4-podslice", "topology": "2x2x1", "slices": 2}}),
        "spec.tpu.slices",
    ),
    ("zero slices", manifest({"tpu": {"slices": 0}}), "spec.tpu.slices"),
]
