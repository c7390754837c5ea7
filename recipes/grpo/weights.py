"""The trainer's side of a weight push: full weights out of the shards into a folder the
rollout servers load, token log-probs for the loss, and the trainer's own greedy output for the
check.

The folder is written under a temporary name and renamed into place, so a server never reads a
half-written model; it holds config, generation config, tokenizer and one model.safetensors,
which is what vLLM's `reload_weights` and SGLang's `update_weights_from_disk` read.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict


def gather_full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict out of FSDP2/DTensor shards (collective: every rank calls); the
    tensors land on rank 0's host memory, other ranks get an empty dict."""
    return get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )


def hf_shapes(model_path: str) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in the HF checkpoint the servers started from: the layout a push
    must keep (read from the safetensors headers, no tensor is loaded)."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for path in sorted(Path(model_path).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as fh:
            for key in fh.keys():
                shapes[key] = tuple(fh.get_slice(key).get_shape())
    return shapes


def check_hf_layout(tensors: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]]) -> None:
    """Every tensor full and plain (no DTensor, no shard), named and shaped as the HF
    checkpoint has it: what vLLM and SGLang load. Raise naming the first that is not."""
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise ValueError(
            f"weights to push differ from the HF checkpoint's names: missing "
            f"{missing[:3]}, unexpected {extra[:3]}"
        )
    for key, value in tensors.items():
        if type(value) is not torch.Tensor:
            raise ValueError(f"{key}: a {type(value).__name__}, not a plain tensor")
        if tuple(value.shape) != tuple(expected[key]):
            raise ValueError(
                f"{key}: shape {tuple(value.shape)}, the HF checkpoint has {tuple(expected[key])}"
            )


def write_weights(
    state: dict[str, torch.Tensor],
    config: Any,
    generation_config: Any,
    tokenizer: Any,
    root: Path,
    version: str,
    expected: Optional[dict[str, tuple[int, ...]]] = None,
) -> Path:
    """Write the HF folder `root/version` (config, generation config, tokenizer, one
    model.safetensors) under a temporary name and rename it into place; with `expected`,
    check the tensors keep the HF layout first."""
    tensors = {k: v.detach().contiguous() for k, v in state.items()}
    if getattr(config, "tie_word_embeddings", False):
        tensors.pop("lm_head.weight", None)  # shared with the embedding; safetensors refuses both
    if expected is not None:
        check_hf_layout(tensors, expected)
    final = root / version
    staging = root / f".{version}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    config.save_pretrained(staging)
    if generation_config is not None:
        generation_config.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
    if final.exists():
        shutil.rmtree(final)
    os.rename(staging, final)
    return final


def prune_versions(root: Path, keep: int, current: Path) -> None:
    """Delete all but the newest `keep` weight folders (never `current`)."""
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
    for old in folders[:-keep] if keep > 0 else folders:
        if old != current:
            shutil.rmtree(old, ignore_errors=True)


def token_logprobs(
    model: torch.nn.Module,
    seqs: list[tuple[list[int], list[int]]],
    pad_id: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of every completion token given its prefix; (B, T-1) values and 0/1 mask.

    `seqs` holds (prompt ids, completion ids) pairs; sequences are right-padded.
    """
    length = max(len(p) + len(c) for p, c in seqs)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), length), dtype=torch.long)
    mask = torch.zeros((len(seqs), length - 1))
    for i, (prompt, completion) in enumerate(seqs):
        n = len(prompt) + len(completion)
        ids[i, :n] = torch.tensor(prompt + completion)
        attn[i, :n] = 1
        mask[i, len(prompt) - 1 : n - 1] = 1  # position t predicts token t+1
    ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = torch.gather(F.log_softmax(logits, dim=-1), 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return logp, mask


def greedy_from_folder(
    folder: Path,
    prompt_ids: list[int],
    max_new_tokens: int,
    dtype: torch.dtype,
    device: torch.device,
    eos_id: Optional[int],
) -> tuple[list[int], list[float]]:
    """What a plain HF model loaded from `folder` generates greedily (EOS stripped), with the
    log-prob of each generated token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    ids = torch.tensor([prompt_ids], device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=model.config.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
        )
    tokens = out.sequences[0, len(prompt_ids) :].tolist()
    logprobs = [
        F.log_softmax(step[0].float(), dim=-1)[tok].item() for step, tok in zip(out.logits, tokens)
    ]
    kept = strip_eos(tokens, eos_id)
    return kept, logprobs[: len(kept)]


def sample_from_folder(
    folder: str,
    prompts: list[str],
    n: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    dtype: torch.dtype,
    device: torch.device,
) -> list[tuple[int, list[int], list[int], str]]:
    """(prompt index, prompt ids, completion ids, text): n samples per prompt from a plain HF
    model on `folder`, for runs without rollout servers (rollout=none)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    eos = tokenizer.eos_token_id
    torch.manual_seed(seed)
    out = []
    for index, prompt in enumerate(prompts):
        ids = tokenizer(prompt).input_ids
        prompt_t = torch.tensor([ids], device=device)
        with torch.no_grad():
            rows = model.generate(
                input_ids=prompt_t,
                attention_mask=torch.ones_like(prompt_t),
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                num_return_sequences=n,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        for row in rows[:, len(ids) :].tolist():
            completion = row[: row.index(eos) + 1] if eos in row else row  # drop the padding
            out.append(
                (index, ids, completion, tokenizer.decode(completion, skip_special_tokens=True))
            )
    return out


def strip_eos(ids: list[int], eos_id: Optional[int]) -> list[int]:
    """Drop a trailing EOS: engines differ on whether the stop token is part of the output."""
    return ids[:-1] if ids and eos_id is not None and ids[-1] == eos_id else ids
