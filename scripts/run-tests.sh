#!/usr/bin/env bash
# `make test`: type checks, then every test, on real parts. Starts the local Slurm test cluster
# (two slurmd with 8 fake GPUs each on loopback) for the Slurm tests and stops it afterwards, by
# PID; then the engine-free tests once more in a core-only install (`make test-fast`).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
echo "run-tests: mypy launcher/" >&2
$BIN/mypy launcher || { echo "run-tests: mypy found type errors" >&2; exit 1; }
started_slurm=0
if [ "${AREAL_SKIP_SLURM:-0}" != 1 ]; then
  if bash scripts/slurm/start-slurm.sh; then started_slurm=1; else
    echo "run-tests: could not start the Slurm test cluster" >&2; exit 1; fi
fi
cleanup() { [ "$started_slurm" = 1 ] && bash scripts/slurm/stop-slurm.sh; }
trap cleanup EXIT
$BIN/pytest -p no:cacheprovider -ra "$@" tests
rc=$?
[ $rc = 5 ] && { echo "run-tests: pytest collected no tests" >&2; exit 1; }
[ $rc = 0 ] || exit $rc
echo "run-tests: the engine-free tests in a core-only install" >&2
make --no-print-directory test-fast
