"""A ~1B-parameter random-weight Llama for scripts/gpu-check.sh's memory check.

The tiny model's tokenizer with a model large enough that weights, gradients, optimizer state
and activations dominate a GPU's memory, so the launcher's estimate can be compared with a real
step's peak. Random weights: no hub access on the GPU machine.
    python scripts/gpu/mid_model.py TINY_MODEL_DIR OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPE = dict(
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=16,
    num_attention_heads=16,
    num_key_value_heads=16,
    head_dim=128,
    vocab_size=32000,
    max_position_embeddings=2048,
)


def main(tiny: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for item in tiny.iterdir():
        if (
            item.suffix in (".json", ".txt")
            and item.name != "config.json"
            and not item.name.startswith("model")
        ):
            shutil.copy(item, out / item.name)
    config = LlamaConfig.from_pretrained(tiny)
    for key, value in SHAPE.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    print(f"mid model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters in {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
