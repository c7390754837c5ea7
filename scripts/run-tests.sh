#!/usr/bin/env bash
# `make test`: type checks, then every test, on real parts. Starts the local Slurm test cluster
# (two slurmd with 8 fake GPUs each on loopback) and a Ray cluster (two nodes with 8 fake GPUs
# each, 127.0.0.2-3) for the Slurm and Ray tests and stops both afterwards, by PID; then the
# engine-free tests once more in a core-only install (`make test-fast`).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
echo "run-tests: mypy launcher/" >&2
$BIN/mypy launcher || { echo "run-tests: mypy found type errors" >&2; exit 1; }
started_slurm=0
ray_dir=""
cleanup() {
  [ "$started_slurm" = 1 ] && bash scripts/slurm/stop-slurm.sh
  [ -n "$ray_dir" ] && bash scripts/ray/stop-ray-cluster.sh "$ray_dir" >/dev/null
}
trap cleanup EXIT
if [ "${AREAL_SKIP_SLURM:-0}" != 1 ]; then
  if bash scripts/slurm/start-slurm.sh; then started_slurm=1; else
    echo "run-tests: could not start the Slurm test cluster" >&2; exit 1; fi
fi
if [ "${AREAL_SKIP_RAY:-0}" != 1 ]; then
  out=$(RAY_BIN=$BIN/ray bash scripts/ray/start-ray-cluster.sh) || {
    echo "run-tests: could not start the Ray test cluster" >&2; exit 1; }
  ray_dir=$(sed -n 's/.*state in \([^ ]*\)$/\1/p' <<<"$out" | head -n 1)
  export AREAL_RAY_CLUSTER=$ray_dir   # tests/conftest.py `ray_cluster` uses it
fi
$BIN/pytest -p no:cacheprovider -ra "$@" tests
rc=$?
[ $rc = 5 ] && { echo "run-tests: pytest collected no tests" >&2; exit 1; }
[ $rc = 0 ] || exit $rc
echo "run-tests: the engine-free tests in a core-only install" >&2
make --no-print-directory test-fast
