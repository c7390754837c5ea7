#!/usr/bin/env bash
# `make test`: type checks, ruff's lint and format, the import layers, then every test, on real parts. Starts the local Slurm test cluster
# (two slurmd with 8 fake GPUs each on loopback) and stops it afterwards, by PID; the Ray tests
# start their own two-node Ray cluster (tests/conftest.py `ray_cluster`) and stop it when done.
# Two pytest workers (pytest-xdist, --dist loadgroup): the tests on the Slurm and Ray clusters
# run one after another on one of them, as do the tests of a module that share one run (a
# module-scoped fixture); the rest spread over both (tests/conftest.py). The core-only venv is
# exercised by tests/test_preflight.py; `make test-fast` runs every engine-free test in it.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
echo "run-tests: mypy launcher/" >&2
$BIN/mypy launcher || { echo "run-tests: mypy found type errors" >&2; exit 1; }
echo "run-tests: ruff (lint, and the format at line length 100)" >&2
RUFF_PATHS="launcher recipes tests scripts benchmarks hydra_plugins"
$BIN/ruff check $RUFF_PATHS || { echo "run-tests: ruff check found problems" >&2; exit 1; }
$BIN/ruff format --check $RUFF_PATHS || {
  echo "run-tests: ruff format would change files (run: .venv/bin/ruff format $RUFF_PATHS)" >&2; exit 1; }
echo "run-tests: lint-imports (the layers of docs/architecture.md)" >&2
$BIN/lint-imports || { echo "run-tests: an import breaks the layers (pyproject.toml)" >&2; exit 1; }
started_slurm=0
cleanup() {
  [ "$started_slurm" = 1 ] && bash scripts/slurm/stop-slurm.sh
}
trap cleanup EXIT
if [ "${AREAL_SKIP_SLURM:-0}" != 1 ]; then
  if bash scripts/slurm/start-slurm.sh; then started_slurm=1; else
    echo "run-tests: could not start the Slurm test cluster" >&2; exit 1; fi
fi
$BIN/pytest -p no:cacheprovider -ra --durations=25 -n "${AREAL_TEST_WORKERS:-2}" \
  --dist loadgroup "$@" tests
rc=$?
[ $rc = 5 ] && { echo "run-tests: pytest collected no tests" >&2; exit 1; }
exit $rc
