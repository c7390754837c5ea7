#!/usr/bin/env bash
# Start a real multi-node Ray cluster on this host, with fake GPUs, on loopback only, for the Ray
# runner's tests (tests/conftest.py `ray_cluster`) and benchmarks; scripts/run-tests.sh starts one
# around `make test`. Measured facts behind each choice: /work/shared/reference/ray.md.
#   start-ray-cluster.sh [DIR]     (DIR: state folder; default: a new `mktemp -d /tmp/rc.XXXXXX`)
# Env: RAY_NODES (2, up to 16), RAY_GPUS_PER_NODE (8), RAY_CPUS_PER_NODE (2), RAY_OBJ_MB (128 per node),
#      RAY_CPU_NODES (1: CPU-only nodes after them, no GPUs and the custom resource cpu_node: 1,
#      what a plan's CPU-only node group asks for with launcher.group_resources.cpu={cpu_node: 1}),
#      RAY_DASHBOARD (1: HTTP API on the head, needed by `ray job` and the state API; 0: off),
#      RAY_BIN (the `ray` CLI of the venv the driver uses, versions must match; default: this
#      project's .venv/bin/ray, else `ray` on PATH),
#      RAY_IP_PREFIX (127.0.0: the nodes' loopback addresses; another, e.g. 127.0.1, runs a second
#      cluster beside the test cluster, on addresses of its own).
# Node k runs `ray start --block` in a session of its own (PID file DIR/node<k>.pid == session id)
# with --node-ip-address <prefix>.<k+2> (127.0.0.1 is rewritten by Ray to the host's external IP).
# Prints, and writes to DIR/env, the variables a driver needs:
#   RAY_ADDRESS (GCS host:port for ray.init), RAY_API_SERVER_ADDRESS (http://.. for `ray job`),
#   RAY_TMPDIR (keeps Ray's files inside DIR). Stop with stop-ray-cluster.sh DIR.
set -euo pipefail
NODES=${RAY_NODES:-2}; GPUS=${RAY_GPUS_PER_NODE:-8}; CPUS=${RAY_CPUS_PER_NODE:-2}
CPU_NODES=${RAY_CPU_NODES:-1}; ALL=$((NODES + CPU_NODES)); PREFIX=${RAY_IP_PREFIX:-127.0.0}
[[ $NODES =~ ^[0-9]+$ ]] && [ "$NODES" -ge 1 ] && [ "$NODES" -le 16 ] \
  || { echo "RAY_NODES=$NODES: choose 1 to 16 (one raylet each on this machine)" >&2; exit 1; }
[[ $PREFIX =~ ^127\.[0-9]{1,3}\.[0-9]{1,3}$ ]] \
  || { echo "RAY_IP_PREFIX=$PREFIX: a loopback prefix such as 127.0.1" >&2; exit 1; }
OBJ=$(( ${RAY_OBJ_MB:-128} * 1024 * 1024 ))
PROJECT_RAY=$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/ray
RAY=${RAY_BIN:-$([ -x "$PROJECT_RAY" ] && echo "$PROJECT_RAY" || echo ray)}
command -v "$RAY" >/dev/null || { echo "no '$RAY' command: activate the venv or set RAY_BIN" >&2; exit 1; }
DIR=${1:-$(mktemp -d /tmp/rc.XXXXXX)}   # keep it short: Ray's unix sockets live under it
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
# Ray puts unix sockets at DIR/n0/session_<date>_<pid>/sockets/plasma_store (max 107 bytes)
[ ${#DIR} -le 38 ] || { echo "DIR too long for Ray's socket paths (max 38 chars): $DIR" >&2; exit 1; }
BIN=$(cd "$(dirname "$(command -v "$RAY")")" && pwd); PY=$BIN/python
[ -x "$PY" ] || PY=python3
# job entrypoints and actors inherit this PATH: put the venv first so `python` is the venv's
export PATH="$BIN:$PATH"
HERE=$(cd "$(dirname "$0")" && pwd)
fail() { echo "$1; stopping what started" >&2; "$HERE/stop-ray-cluster.sh" "$DIR" >&2; exit 1; }
if ls "$DIR"/node*.pid >/dev/null 2>&1; then echo "already started in $DIR (stop it first)" >&2; exit 1; fi

# free ports: GCS, client server, dashboard, one dashboard-agent HTTP port per node
read -r -a PORTS <<<"$("$PY" -c "
import socket
ss=[socket.socket() for _ in range(3+$ALL)]
for s in ss: s.bind(('127.0.0.1',0))
print(' '.join(str(s.getsockname()[1]) for s in ss))")"
GCS=${PORTS[0]}; CLIENT=${PORTS[1]}; DASH=${PORTS[2]}
export RAY_TMPDIR=$DIR RAY_USAGE_STATS_ENABLED=0
# SIGTERM to a node drains it for up to 30 s by default while actors run; tests want it quick
export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=${RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S:-1}

common() {  # args: k (nodes from NODES on are CPU-only)
  local gpus=$GPUS; [ "$1" -ge "$NODES" ] && gpus=0
  echo --node-ip-address="$PREFIX.$(( $1 + 2 ))" --num-cpus="$CPUS" --num-gpus="$gpus" \
    --object-store-memory="$OBJ" --temp-dir="$DIR/n$1" --dashboard-agent-listen-port="${PORTS[$((3 + $1))]}" \
    --min-worker-port=0 --max-worker-port=0 --disable-usage-stats --block
}
start_node() {  # args: k, extra ray start args...
  local k=$1; shift
  # RAY_TEST_CLUSTER_DIR marks every process of the cluster (inherited) for stop-ray-cluster.sh
  RAY_TEST_CLUSTER_DIR=$DIR setsid "$RAY" start "$@" $(common "$k") >"$DIR/node$k.out" 2>&1 </dev/null &
  echo $! >"$DIR/node$k.pid"
}
wait_up() {  # args: k
  for _ in $(seq 1200); do
    grep -q 'Ray runtime started' "$DIR/node$1.out" 2>/dev/null && return 0
    kill -0 "$(cat "$DIR/node$1.pid")" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$DIR/node$1.out" >&2; return 1
}

t0=$(date +%s.%N)
start_node 0 --head --port="$GCS" --ray-client-server-port="$CLIENT" \
  --include-dashboard="$([ "${RAY_DASHBOARD:-1}" = 1 ] && echo true || echo false)" \
  --dashboard-host=127.0.0.1 --dashboard-port="$DASH"
wait_up 0 || fail "the head did not start"
for k in $(seq 1 $((NODES - 1))); do start_node "$k" --address="$PREFIX.2:$GCS"; done
for k in $(seq "$NODES" $((ALL - 1))); do
  start_node "$k" --address="$PREFIX.2:$GCS" --resources='{"cpu_node": 1}'; done
for k in $(seq 1 $((ALL - 1))); do wait_up "$k" || fail "node $k did not start"; done
cat >"$DIR/env" <<ENV
export RAY_ADDRESS=$PREFIX.2:$GCS
export RAY_API_SERVER_ADDRESS=http://127.0.0.1:$DASH
export RAY_TMPDIR=$DIR
ENV
echo "# $NODES nodes x $GPUS GPUs + $CPU_NODES CPU-only up in $("$PY" -c "import time;print(round(time.time()-$t0,1))") s; state in $DIR"
cat "$DIR/env"
