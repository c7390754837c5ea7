"""Build the tiny Llama that `make demo` serves and trains: no hub access is needed.

`python -m launcher.trainer.tiny_model [OUT] [--seed N] [--force]` writes a random-weight Llama
(hidden
128, 2 layers, 4 heads of 32: vLLM's CPU attention refuses head sizes below 32) with a byte-level
BPE tokenizer trained here on a small corpus of number words, so the demo's reward (say numbers)
is reachable from the first step. Default folder: $AREAL_TINY_MODEL, else
~/.cache/areal-launch/tiny-llama. The model is built in a temporary sibling folder and renamed
into place after a marker file is written last, so a reader never sees half a model and a
second builder racing the first simply keeps the winner's folder.

Only the functions that locate the model are importable without torch; the build itself
imports torch, tokenizers and transformers inside `build`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

ENV_DIR = "AREAL_TINY_MODEL"
DEFAULT_DIR = "~/.cache/areal-launch/tiny-llama"
MARKER = ".areal-tiny-model-complete"

NUMBER_WORDS = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
)
_SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]
_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def default_path() -> Path:
    """Where the tiny model lives unless the caller names a folder."""
    return Path(os.path.expanduser(os.environ.get(ENV_DIR) or DEFAULT_DIR))


def is_built(path: os.PathLike | str) -> bool:
    """True when a complete model is in `path` (the marker is the last file written)."""
    return (Path(path) / MARKER).is_file()


def _corpus() -> list[str]:
    """Counting, small sums and chat turns: every number word becomes a token of its own."""
    words = NUMBER_WORDS
    lines = []
    for start in range(len(words)):
        lines.append("count: " + " ".join(words[start : start + 5]))
    for a in range(5):
        for b in range(5):
            lines.append(f"{words[a]} plus {words[b]} is {words[a + b]}")
    lines += [
        "user: say some numbers\nassistant: one two three",
        "system: you are a small model that likes to count",
        "the quick brown fox jumps over the lazy dog",
        "hello world, this model is tiny and trained by reinforcement",
    ]
    return lines * 10


def build(out: Path, seed: int = 0) -> Path:
    """Write the tokenizer, config and random weights into `out` (which must not exist)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        _corpus(),
        trainers.BpeTrainer(
            vocab_size=448,
            special_tokens=_SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    bos = bpe.token_to_id("<s>")
    # BOS in front of every prompt, as vLLM's tokenizer call does: keeps server and trainer equal
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=512,
    )
    tokenizer.chat_template = _CHAT_TEMPLATE

    config = LlamaConfig(**shape(tokenizer, head_dim=32))
    # transformers >= 5 names it `dtype`; older releases read `torch_dtype`
    setattr(config, "dtype" if hasattr(config, "dtype") else "torch_dtype", "float32")
    save(tokenizer, LlamaForCausalLM(config).float(), out)
    return out


def shape(tokenizer: Any, **changes: Any) -> dict[str, Any]:
    """The tiny model's size, for the demo's Llama and AReaL's Qwen2 alike (scripts/areal):
    heads of 32, the smallest vLLM's CPU attention takes, and the tokenizer's special ids."""
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 512,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": False,
        **changes,
    }


def save(tokenizer: Any, model: Any, out: Path) -> None:
    """Write `model` and `tokenizer` into `out` (which must not exist), generation ids as the
    config's, so that servers and trainers stop and pad alike."""
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(model.generation_config, key, getattr(model.config, key))
    out.mkdir(parents=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)


def ensure(path: Optional[os.PathLike | str] = None, seed: int = 0, force: bool = False) -> Path:
    """Return a folder holding a complete tiny model, building it only when needed."""
    final = Path(path).expanduser() if path else default_path()
    if is_built(final) and not force:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(staging / "model", seed=seed)
        (staging / "model" / MARKER).write_text(f"seed={seed}\n")
        if final.exists() and (force or not is_built(final)):
            # an old or half-written folder: move it aside first, rename is atomic per path
            shutil.move(str(final), str(staging / "old"))
        try:
            os.rename(staging / "model", final)
        except OSError:
            if not is_built(final):  # lost a race to something that is not a model
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launcher.trainer.tiny_model",
        description="Build the tiny Llama used by the demo.",
    )
    parser.add_argument(
        "out", nargs="?", default=None, help=f"model folder (default: ${ENV_DIR} or {DEFAULT_DIR})"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args(argv)
    target = Path(args.out).expanduser() if args.out else default_path()
    reused = is_built(target) and not args.force
    folder = ensure(target, seed=args.seed, force=args.force)
    print(f"tiny model {'reused' if reused else 'built'}: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
