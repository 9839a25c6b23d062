"""The built-in tokenizer of size tiny: one printable ASCII character per token, no files needed.

Why it exists: tests and RLJobs with size tiny and no tokenizerPath must run offline without a tokenizer
file. The demo task itself is ordinary data and an ordinary reward ("emit a:" prompts, reward
answerCharFraction: ``data.emit_dataset`` and ``rewards.answer_char_fraction``), and the demo example
(examples/tiny-cpu.yaml) uses a real tokenizer.json instead (examples/tiny/).
"""

from __future__ import annotations

import numpy as np

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
VOCAB_SIZE = 256
"""The tiny model's vocabulary: 0-2 are specials, 32-126 printable ASCII, the rest decode to '?'."""


class CharTokenizer:
    """A byte-level tokenizer with Tunix's duck-typed interface (encode/decode/bos_id/eos_id/pad_id).

    Printable ASCII maps to its code point; ids that are not printable ASCII (other than the specials,
    which decode to nothing) decode to '?', so every generated token is one character and the reward
    counts tokens.
    """

    def encode(self, text: str, **_: object) -> list[int]:
        ids = [ord(c) for c in text]
        bad = [c for c, i in zip(text, ids, strict=True) if not 32 <= i <= 126]
        if bad:
            raise ValueError(f"CharTokenizer encodes printable ASCII only, got {bad!r}")
        return ids

    def decode(self, ids: list[int] | np.ndarray, **_: object) -> str:
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i in (PAD_ID, BOS_ID, EOS_ID):
                continue
            out.append(chr(i) if 32 <= i <= 126 else "?")
        return "".join(out)

    def bos_id(self) -> int:
        return BOS_ID

    def eos_id(self) -> int:
        return EOS_ID

    def pad_id(self) -> int:
        return PAD_ID
