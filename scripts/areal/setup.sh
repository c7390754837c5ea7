#!/usr/bin/env bash
# Set up AReaL 1.0.4 beside areal-launch, for its examples/math/gsm8k_rl.py on CPU
# (scripts/areal/README.md says how far that goes). Idempotent: each step says what it does
# and is skipped when its result is there.
#
#   bash scripts/areal/setup.sh            # venv .venv-areal, tiny Qwen2, dataset, AReaL example
#   AREAL_ASSETS=DIR bash scripts/areal/setup.sh
#
# 1. .venv-areal (gitignored by .venv-*/): AReaL pins torch>=2.9.1,<2.11, transformers<=5.3,
#    hydra-core 1.4.0.dev1 and omegaconf 2.4.0.dev2, which clash with our venv. AReaL's other
#    ~80 requirements are agent and tracking libraries gsm8k_rl.py never touches, so areal is
#    installed with --no-deps plus exactly what its import chain and first step load (found by
#    running it). torch: 2.13.0+cpu, outside AReaL's pin, on purpose: on x86_64 every torch in
#    the pin that pip can reach (PyPI's 2.9.1/2.10) is a CUDA build of several GB, and 2.13.0+cpu
#    lies on this machine's disk; AReaL's FSDP2 engine runs on it (two gloo ranks).
# 2. A tiny Qwen2 (random weights, the repo's tiny tokenizer) and a GSM8K-format dataset:
#    scripts/areal/make_assets.py.
# 3. AReaL's example files at tag v1.0.4 (not in the wheel): from a local clone given in
#    AREAL_REPO (a git directory), else a shallow clone of the public repo. Never committed here.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${AREAL_VENV:-$ROOT/.venv-areal}
ASSETS=${AREAL_ASSETS:-$ROOT/.cache/areal}
PY=${PYTHON:-python3}
step() { echo "== $*"; }
# pip without the local index's "is ignored" lines and, after --no-deps, the list of areal's unmet
# requirements (the agent libraries, torch's pin): expected; the import check below tells
# whether the install is enough. Returns pip's own status.
pip_quiet() {
  "$VENV/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -vE "is ignored|^areal 1\.0\.4 requires|dependency resolver does not" || true; }
  return "${PIPESTATUS[0]}"
}

# what the gsm8k example imports and runs (areal 1.0.4's own pins where it has them)
DEPS=(
  'transformers>=5.0.0,<=5.3.0' hydra-core==1.4.0.dev1 omegaconf==2.4.0.dev2 'datasets>=3.0.0'
  'peft<=0.18.1' math-verify==0.8.0 'swanlab==0.6.12' 'networkx==3.3' 'pillow>=12.1.1'
  'aiohttp>=3.13.3,<4' 'uvloop>=0.21.0' 'tenacity>=8.2.0' colorlog flask torchdata lark ray
  numba orjson einops aiofiles openai trackio wandb tensorboardX tabulate pybase64 psutil
  pyzmq requests pyyaml
)

if [ -f "$VENV/.areal-setup-complete" ]; then
  step "venv $VENV: present (rm -r it to rebuild)"
else
  step "venv $VENV: torch 2.13.0 (CPU wheel on disk), areal==1.0.4 --no-deps, ${#DEPS[@]} packages"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  pip_quiet torch==2.13.0 numpy
  pip_quiet --no-deps areal==1.0.4
  pip_quiet torch==2.13.0 "${DEPS[@]}" || echo "(pip's exit status above: $?; the import check decides)"
  "$VENV/bin/python" -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__
from areal import PPOTrainer; import areal.reward.gsm8k, areal.workflow.rlvr, peft"
  touch "$VENV/.areal-setup-complete"
fi

if [ -f "$ASSETS/tiny-qwen2/model.safetensors" ] && [ -f "$ASSETS/gsm8k/main/train.jsonl" ]; then
  step "tiny Qwen2 and dataset in $ASSETS: present"
else
  step "tiny Qwen2 and GSM8K-format dataset into $ASSETS"
  PYTHONPATH="$ROOT" "$VENV/bin/python" "$ROOT/scripts/areal/make_assets.py" "$ASSETS"
fi

EX="$ASSETS/areal-v1.0.4"
if [ -f "$EX/examples/math/gsm8k_rl.py" ]; then
  step "AReaL v1.0.4 example in $EX: present"
else
  step "AReaL v1.0.4's examples/math into $EX"
  mkdir -p "$EX"
  if [ -n "${AREAL_REPO:-}" ]; then
    git --git-dir="$AREAL_REPO" archive v1.0.4 examples/math | tar -x -C "$EX"
  else
    git clone -q --depth 1 --branch v1.0.4 https://github.com/inclusionAI/AReaL "$EX.clone"
    mkdir -p "$EX/examples" && cp -r "$EX.clone/examples/math" "$EX/examples/" && rm -rf "$EX.clone"
  fi
fi
step "done: venv $VENV, model $ASSETS/tiny-qwen2, data $ASSETS/gsm8k, entry $EX/examples/math/gsm8k_rl.py"
