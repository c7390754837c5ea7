#!/usr/bin/env bash
# Set up AReaL beside areal-launch, for its examples/math/gsm8k_rl.py on CPU
# (scripts/areal/README.md says how far that goes). Idempotent: each step says what it does
# and is skipped when its result is there.
#
#   bash scripts/areal/setup.sh                       # AReaL 1.0.4 (the package index's last)
#   AREAL_VERSION=2.0.0 bash scripts/areal/setup.sh   # AReaL 2.0.0, from its source tag
#   AREAL_ASSETS=DIR bash scripts/areal/setup.sh
#
# 1. A venv of its own per version (.venv-areal for 1.0.4, .venv-areal2 for 2.0.0; gitignored
#    by .venv-*/): AReaL pins torch>=2.9.1,<2.11, transformers<=5.3, hydra-core 1.4.0.dev1 and
#    omegaconf 2.4.0.dev2, which clash with our venv. AReaL's other ~80 requirements are agent
#    and tracking libraries gsm8k_rl.py never touches, so areal is installed with --no-deps
#    plus exactly what its import chain and first step load (found by running it). torch:
#    2.13.0+cpu, outside AReaL's pin, on purpose: on x86_64 every torch in the pin that pip can
#    reach (PyPI's 2.9.1/2.10) is a CUDA build of several GB, and 2.13.0+cpu lies on this
#    machine's disk; AReaL's FSDP2 engine runs on it (two gloo ranks). 1.0.4 comes from the
#    package index; 2.0.0 is only on GitHub: its source at tag v2.0.0, installed from there.
# 2. A tiny Qwen2 (random weights, the repo's tiny tokenizer) and a GSM8K-format dataset:
#    scripts/areal/make_assets.py.
# 3. AReaL's source (2.0.0) or example files (1.0.4, not in the wheel) at the version's tag:
#    from a local clone given in AREAL_REPO (a git directory), else a shallow clone of the
#    public repo. Never committed here.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VERSION=${AREAL_VERSION:-1.0.4}
case "$VERSION" in
  1.0.4) DEFAULT_VENV=$ROOT/.venv-areal ;;
  2.0.0) DEFAULT_VENV=$ROOT/.venv-areal2 ;;
  *) echo "error: AREAL_VERSION=$VERSION: this script sets up 1.0.4 or 2.0.0" >&2; exit 2 ;;
esac
VENV=${AREAL_VENV:-$DEFAULT_VENV}
ASSETS=${AREAL_ASSETS:-$ROOT/.cache/areal}
PY=${PYTHON:-python3}
SRC="$ASSETS/areal-v$VERSION"  # 1.0.4: its examples/math only; 2.0.0: the whole source tree
step() { echo "== $*"; }
# pip without the local index's "is ignored" lines and, after --no-deps, the list of areal's unmet
# requirements (the agent libraries, torch's pin): expected; the import check below tells
# whether the install is enough. Returns pip's own status.
pip_quiet() {
  "$VENV/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -vE "is ignored|^areal [0-9.]+ requires|dependency resolver does not" || true; }
  return "${PIPESTATUS[0]}"
}

# what the gsm8k example imports and runs (areal's own pins where it has them); 2.0.0's import
# chain adds its RPC and proxy layers' libraries
DEPS=(
  'transformers>=5.0.0,<=5.3.0' hydra-core==1.4.0.dev1 omegaconf==2.4.0.dev2 'datasets>=3.0.0'
  'peft<=0.18.1' math-verify==0.8.0 'swanlab==0.6.12' 'networkx==3.3' 'pillow>=12.1.1'
  'aiohttp>=3.13.3,<4' 'uvloop>=0.21.0' 'tenacity>=8.2.0' colorlog flask torchdata lark ray
  numba orjson einops aiofiles openai trackio wandb tensorboardX tabulate pybase64 psutil
  pyzmq requests pyyaml
)
if [ "$VERSION" = 2.0.0 ]; then
  DEPS+=(msgspec 'httpx>=0.28.1' 'fastapi>=0.115.12' uvicorn pydantic blosc regex json5
    python-dotenv setproctitle zstandard openai-agents)
  IMPORTS="from areal import PPOTrainer; import areal.reward.gsm8k, areal.workflow.openai.math_agent, areal.workflow.rlvr, peft"
else
  IMPORTS="from areal import PPOTrainer; import areal.reward.gsm8k, areal.workflow.rlvr, peft"
fi

# AReaL's files at tag v$VERSION: a local clone's git directory (AREAL_REPO), else GitHub
fetch_tag() {  # fetch_tag DEST PATHS...
  local dest=$1; shift
  mkdir -p "$dest"
  if [ -n "${AREAL_REPO:-}" ]; then
    git --git-dir="$AREAL_REPO" archive "v$VERSION" "$@" | tar -x -C "$dest"
  else
    git clone -q --depth 1 --branch "v$VERSION" https://github.com/areal-project/AReaL "$dest.clone"
    (cd "$dest.clone" && tar -c "$@") | tar -x -C "$dest" && rm -rf "$dest.clone"
  fi
}

if [ "$VERSION" = 2.0.0 ] && [ ! -f "$SRC/pyproject.toml" ]; then
  step "AReaL v2.0.0's source (pyproject.toml, areal/, examples/) into $SRC"
  fetch_tag "$SRC" pyproject.toml README.md LICENSE areal examples
fi

if [ -f "$VENV/.areal-setup-complete" ]; then
  step "venv $VENV: present (rm -r it to rebuild)"
else
  from=$([ "$VERSION" = 2.0.0 ] && echo "its source $SRC" || echo "the package index")
  step "venv $VENV: torch 2.13.0 (CPU wheel on disk), areal $VERSION --no-deps from $from, ${#DEPS[@]} packages"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  pip_quiet torch==2.13.0 numpy
  if [ "$VERSION" = 2.0.0 ]; then pip_quiet --no-deps "$SRC"; else pip_quiet --no-deps areal==1.0.4; fi
  pip_quiet torch==2.13.0 "${DEPS[@]}" || echo "(pip's exit status above: $?; the import check decides)"
  "$VENV/bin/python" -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__
$IMPORTS"
  touch "$VENV/.areal-setup-complete"
fi

if [ -f "$ASSETS/tiny-qwen2/model.safetensors" ] && [ -f "$ASSETS/gsm8k/main/train.jsonl" ] \
  && [ -f "$ASSETS/boba/train.jsonl" ]; then
  step "tiny Qwen2 and datasets in $ASSETS: present"
else
  step "tiny Qwen2, GSM8K- and boba-format datasets into $ASSETS"
  PYTHONPATH="$ROOT" "$VENV/bin/python" "$ROOT/scripts/areal/make_assets.py" "$ASSETS"
fi

if [ -f "$SRC/examples/math/gsm8k_rl.py" ]; then
  step "AReaL v$VERSION example in $SRC: present"
else
  step "AReaL v$VERSION's examples/math into $SRC"
  fetch_tag "$SRC" examples/math
fi
step "done: venv $VENV, model $ASSETS/tiny-qwen2, data $ASSETS/gsm8k, entry $SRC/examples/math/gsm8k_rl.py"
