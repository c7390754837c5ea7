#!/usr/bin/env bash
# What a GPU machine runs to check the Megatron recipe's training step, which CPU cannot run
# (megatron-core 0.16.1 needs CUDA for its RNG tracker, RoPE and attention buffers).
# UNTESTED: no GPU was available where this recipe was written.
# Needs 5 GPUs (1 rollout + 4 actor), CUDA torch, `pip install -e '.[megatron]'`, and vLLM
# for rollout.
# Each run must end with "reloads confirmed N/N" (greedy tokens and log-probs of every server
# equal the trainer's after every push).
set -euo pipefail
cd "$(dirname "$0")/../.."
ENTRY=trainer.entry=recipes/grpo_megatron/train.py
for backend in "megatron:d1t2p2" "'megatron:(attn:d2t2|ffn:t2e2)'"; do
  out=$(areal-launch "$ENTRY" "actor.backend=$backend" rollout.backend=vllm:d1 \
        cluster.device=cuda recipe.steps=3 2>&1 | tee /dev/stderr)
  grep -q "reloads confirmed 3/3" <<<"$out" || { echo "gpu_check: $backend failed" >&2; exit 1; }
done
echo "gpu_check: megatron recipe trained and every reload was confirmed"
