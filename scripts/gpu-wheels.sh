#!/usr/bin/env bash
# Wheels that scripts/gpu-check.sh needs on the lent GPU machine (Python 3.12, torch and
# transformers there; no network, no Hydra). Run here, then carry .whl/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=(python3 -m pip)
PY=.venv/bin/python; [ -x "$PY" ] || PY=python3
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
rm -rf .whl && mkdir -p .whl
"${PIP[@]}" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform any -d .whl "hydra-core==$(version hydra-core)" \
  "omegaconf==$(version omegaconf)"
# megatron-core for the Megatron recipe's training step (its own needs are torch, numpy and
# packaging, already there)
"${PIP[@]}" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d .whl "megatron-core==$(version megatron-core)"
# antlr4's runtime is published as a source archive only: build its (pure-Python) wheel here
"${PIP[@]}" wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
du -sh .whl
