"""Row utilization of the packer on the real-shape workload, by micro-batch size (planning only, no model).

Why: packing alone is bounded by rows computed (a step's cost follows rows), so the benchmark's batch
decides how close it can come to the token-ratio limit. For each batch: ``workload_gsm8k``'s first step
(seed 0, as ``bench/packing.py --models real``), ``plan_layout`` with the trainer's ``ShapeCache``, and
real tokens / (rows computed x row).

    .venv/bin/python bench/packing_rows.py --row 256 --batches 4,8,16,32,48,64
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "trainer"), str(ROOT)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--row", type=int, default=256)
    ap.add_argument("--batches", default="4,8,12,16,24,32,40,48,56,64,96")
    ap.add_argument("--block", type=int, default=128)
    a = ap.parse_args()

    from packing_arms import workload_gsm8k
    from rljob_trainer.packing.example import plan_layout
    from rljob_trainer.packing.rows import ShapeCache
    from rljob_trainer.packing.testing import PAD_ID, random_train_example

    max_p, nb, out = round(0.375 * a.row), a.row // a.block, []
    for batch in map(int, a.batches.split(",")):
        ((p, c),) = workload_gsm8k(a.row, batch, 1, 0)
        ex = random_train_example(p, c, max_prompt=max_p, max_completion=a.row - max_p, seed=0)
        pp, cc = np.asarray(ex.prompt_ids), np.asarray(ex.completion_ids)
        shapes = ShapeCache(max_pairs_per_row=nb * (nb + 1) // 2)
        plan = plan_layout(
            pp, pp != PAD_ID, cc, cc != PAD_ID, a.row, pad_id=PAD_ID, attention_block=a.block, shapes=shapes
        ).plan
        real = int((pp != PAD_ID).sum() + (cc != PAD_ID).sum())
        out.append(
            {
                "batch": batch,
                "real_tokens": real,
                "token_ratio_limit": round((pp.size + cc.size) / real, 3),
                "rows_used": plan.rows_used,
                "rows_computed": plan.num_rows,
                "utilization_computed": round(real / (plan.num_rows * a.row), 3),
            }
        )
    print(json.dumps({"row": a.row, "batches": out}, indent=1))


if __name__ == "__main__":
    main()
