#!/usr/bin/env bash
# AReaL 1.0.4's examples/math/gsm8k_rl.py with its gsm8k_grpo_cpu.yaml, both unchanged, under
# areal-launch on CPU: AReaL in .venv-areal (scripts/areal/setup.sh), our vLLM CPU server.
#
#   bash scripts/areal/setup.sh && bash scripts/areal/run.sh [more overrides]
#   bash scripts/areal/run.sh plan [overrides]   # `plan` and leading --flags go to areal-launch first
#   AREAL_VERSION=2.0.0 bash scripts/areal/run.sh # AReaL 2.0.0's (.venv-areal2, its source tag)
#   AREAL_VERSION=2.0.0 AREAL_ENTRY=boba_grpo bash scripts/areal/run.sh
#       # 2.0.0's examples/math/boba_grpo.py instead, with the same yaml: its RLVRWorkflow runs
#       # under a launcher's torchrun, where gsm8k_rl.py's agent workflow stops (README.md)
#
# ASSUMES launcher features being built on other branches (issue 19, "Build" 1 and 3); until
# they are on main this script fails with areal-launch's one-line error naming the key:
#   -cd/-cn on a peer's experiment YAML: its launcher keys read (cluster.n_gpus_per_node: 0 ->
#     a CPU cluster, <engine>.backend, scheduling_spec ...), the rest handed to the entry as
#     `--config <file>` plus the command line's overrides of its keys       (branch `areal`)
#   trainer.python: the interpreter torchrun and the ranks run in            (branch `entry`)
#   AREAL_SPMD_MODE=1 and AREAL_LLM_SERVER_ADDRS=<host:port,...> in the ranks' environment,
#     cluster.fileroot and cluster.name_resolve.nfs_record_root created      (branch `entry`)
#
# Overrides here are values, not changes to AReaL's files: the model and data paths (the yaml
# names Qwen/Qwen2.5-1.5B-Instruct and openai/gsm8k on the hub, which this machine cannot reach),
# two FSDP2 ranks (the yaml's fsdp:d1p1t1 is one) and weight_update_mode=disk: the yaml's xccl
# asks the server for /areal_init_weights_update_group before the first step, which only
# AReaL's own vLLM server has. Even disk mode ends after the first step: its update calls
# /areal_pause_generation, /areal_update_weights, /areal_continue_generation (README.md).
# AREAL_SERVER=1 serves with AReaL's wrapper instead (rollout.python, rollout.server_module):
# that needs AReaL's vLLM (0.19.1, CUDA), not our vLLM CPU build (0.32), so on CPU it fails.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VERSION=${AREAL_VERSION:-1.0.4}
case "$VERSION" in
  1.0.4) VENV=${AREAL_VENV:-$ROOT/.venv-areal} ;;
  2.0.0) VENV=${AREAL_VENV:-$ROOT/.venv-areal2} ;;
  *) echo "error: AREAL_VERSION=$VERSION: this script runs 1.0.4 or 2.0.0" >&2; exit 2 ;;
esac
ASSETS=${AREAL_ASSETS:-$ROOT/.cache/areal}
EX=$ASSETS/areal-v$VERSION/examples/math
LAUNCH=${AREAL_LAUNCH:-$ROOT/.venv/bin/areal-launch}
ENTRY=${AREAL_ENTRY:-gsm8k_rl}
case "$ENTRY" in
  gsm8k_rl) DATA=(train_dataset.path="$ASSETS/gsm8k" valid_dataset.path="$ASSETS/gsm8k") ;;
  # boba's reward is named by module path (examples.math.boba_grpo.boba_reward_fn), imported
  # in the ranks: AReaL's source root on their path, as when it runs from its checkout
  boba_grpo) DATA=(train_dataset.path="$ASSETS/boba/train.jsonl")
    export PYTHONPATH="$ASSETS/areal-v$VERSION${PYTHONPATH:+:$PYTHONPATH}" ;;
  *) echo "error: AREAL_ENTRY=$ENTRY: this script runs gsm8k_rl or boba_grpo" >&2; exit 2 ;;
esac
[ -f "$EX/$ENTRY.py" ] && [ -x "$VENV/bin/python" ] || {
  echo "error: AReaL's venv or example $ENTRY.py missing: run bash scripts/areal/setup.sh first" >&2
  exit 2; }

PRE=()
if [ "${1:-}" = plan ]; then PRE+=(plan); shift; fi
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do PRE+=("$1"); shift; done
SERVER=()
if [ "${AREAL_SERVER:-0}" = 1 ]; then
  SERVER=(rollout.python="$VENV/bin/python" rollout.server_module=areal.engine.vllm_ext.areal_vllm_server)
fi
cd "$ROOT"
exec "$LAUNCH" "${PRE[@]}" -cd "$EX" -cn gsm8k_grpo_cpu \
  trainer.python="$VENV/bin/python" trainer.entry="$EX/$ENTRY.py" \
  actor.path="$ASSETS/tiny-qwen2" "${DATA[@]}" \
  actor.backend=fsdp:d2 rollout.backend=vllm:d1 actor.weight_update_mode=disk \
  "${SERVER[@]}" "$@"
