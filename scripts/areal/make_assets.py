"""Write the tiny Qwen2 and the datasets that AReaL's gsm8k and boba examples read (no hub).

Run with AReaL's venv (transformers 5) and the repository on PYTHONPATH:
`python scripts/areal/make_assets.py OUT` writes OUT/tiny-qwen2, OUT/gsm8k and OUT/boba. The
tokenizer is the repo's tiny model's (launcher.trainer.tiny_model, built in a scratch folder);
the model is a Qwen2ForCausalLM of the same size (head size 32: vLLM's CPU attention refuses
smaller) with a 4096-token context, so the yaml's vllm.max_model_len=2048 fits. The GSM8K
folder's path holds "gsm8k" (AReaL picks its loader by that), its README declares the config
`main` with train/test splits as openai/gsm8k does, and each answer ends in `#### N` (what the
gsm8k reward reads). The boba file holds the same sums in AReaL-boba-Data's columns.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from launcher.trainer import tiny_model

ROWS = {"train": 32, "test": 32}  # the yaml's batch sizes: 16 (train), 32 (valid)
README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train.jsonl
  - split: test
    path: main/test.jsonl
---
"""


def write_model(out: Path) -> None:
    """A random-weight Qwen2 with the tiny model's tokenizer, float32 (no bf16 on this CPU path)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        llama = tiny_model.ensure(Path(scratch) / "llama")
        tok = AutoTokenizer.from_pretrained(llama)
        config = Qwen2Config(
            **tiny_model.shape(tok, num_key_value_heads=2, max_position_embeddings=4096),
            dtype="float32",
        )
        staging = Path(scratch) / "qwen2"
        tiny_model.save(tok, Qwen2ForCausalLM(config).float(), staging)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)


def sums(split: str) -> list[tuple[int, int]]:
    """The dataset's questions: small sums, a test split of other ones."""
    return [(i % 7 + 1, (3 * i + (split == "test")) % 9 + 1) for i in range(ROWS[split])]


def write_dataset(out: Path) -> None:
    """Small sums in GSM8K's columns (question, answer ending in '#### N')."""
    (out / "main").mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text(README)
    for split in ROWS:
        with open(out / "main" / f"{split}.jsonl", "w") as f:
            for a, b in sums(split):
                row = {
                    "question": f"What is {a} plus {b}?",
                    "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
                }
                f.write(json.dumps(row) + "\n")


def write_boba(out: Path) -> None:
    """The same sums in AReaL-boba-Data's columns (prompt, solutions), one JSON-lines file:
    what AReaL 2.0's examples/math/boba_grpo.py loads (`load_dataset("json", data_files=...)`)
    and its reward verifies (math-verify against each solution)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "train.jsonl", "w") as f:
        for a, b in sums("train"):
            row = {"prompt": f"What is {a} plus {b}?", "solutions": [f"\\boxed{{{a + b}}}"]}
            f.write(json.dumps(row) + "\n")


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/areal").resolve()
    root.mkdir(parents=True, exist_ok=True)
    write_model(root / "tiny-qwen2")
    write_dataset(root / "gsm8k")
    write_boba(root / "boba")
    print(
        f"tiny Qwen2: {root / 'tiny-qwen2'}\nGSM8K-format dataset: {root / 'gsm8k'}\n"
        f"boba-format dataset: {root / 'boba' / 'train.jsonl'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
