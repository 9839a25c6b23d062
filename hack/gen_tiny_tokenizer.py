"""Write examples/tiny/: the demo's character-level tokenizer (tokenizer.json + tokenizer_config.json) and its
dataset (emit.jsonl). Run once; the output is committed, so `make demo` needs no download.

The tokenizer is built with the `tokenizers` library: one token per printable ASCII character plus
<pad>, <s>, </s>, <unk> (99 ids, inside the tiny model's 256), a byte-level-free WordLevel model over single
characters, and a chat template, so the same code path as a Hub checkpoint's tokenizer loads it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

OUT = Path(__file__).resolve().parents[1] / "examples" / "tiny"
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}\n{% else %}{{ m['content'] }}"
    "{% endif %}{% endfor %}"
)


def main() -> None:
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for code in range(32, 127):
        vocab[chr(code)] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(SPECIALS)
    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": "<pad>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 4096,
        "chat_template": CHAT_TEMPLATE,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    rows = [{"prompt": "emit a:", "answer": "a"} for _ in range(64)]
    (OUT / "emit.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
