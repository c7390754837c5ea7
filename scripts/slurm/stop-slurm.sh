#!/usr/bin/env bash
# stop-slurm.sh - stop what start-slurm.sh started: cancel all jobs (so no slurmstepd is left
# behind), then TERM (KILL after 15 s) slurmd(s), slurmctld, slurmdbd, MariaDB and munged,
# each by its PID file only. --keep-munge: leave munged running (used on config changes).
# SLURM_BASE and SLURM_ETC name the cluster as for start-slurm.sh; a second cluster (SLURM_ETC
# not /etc/slurm) stops its own slurmctld, slurmd and munged only (MariaDB is the usual one's).
set -uo pipefail
BASE=${SLURM_BASE:-/tmp/areal-slurm}
ETC=${SLURM_ETC:-/etc/slurm}
export SLURM_CONF=$ETC/slurm.conf  # squeue and scancel ask this cluster's controller only
log() { echo "[stop-slurm] $*" >&2; }

stop_pidfiles() {
  local f pid pids=()
  for f in "$@"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null && grep -Eq '^(slurmd|slurmctld|slurmdbd|munged|mariadbd)$' "/proc/$pid/comm"; then
      kill -TERM "$pid" 2>/dev/null; pids+=("$pid"); log "TERM $pid ($(basename "$f"))"
    fi
    rm -f "$f"
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for _ in $(seq 1 150); do
    local left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    [ $left = 0 ] && return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && { log "KILL $pid"; kill -KILL "$pid" 2>/dev/null; }; done
  return 0
}

if [ -s "$BASE/state/slurmctld.pid" ] && kill -0 "$(cat "$BASE/state/slurmctld.pid")" 2>/dev/null; then
  ids=$(squeue -h -o %F 2>/dev/null | sort -u)
  if [ -n "$ids" ]; then
    scancel $ids 2>/dev/null
    for _ in $(seq 1 150); do [ -z "$(squeue -h -o %F 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi
stop_pidfiles "$BASE"/state/slurmd-*.pid "$BASE/state/slurmctld.pid" "$BASE/state/slurmdbd.pid"
if [ "$ETC" != /etc/slurm ]; then  # a second cluster: its own munged; MariaDB is the usual one's
  [ "${1:-}" = "--keep-munge" ] || stop_pidfiles "$BASE/munge/munged.pid"
  mark=" # start-slurm cluster $ETC"  # its line in /etc/hosts goes (not on a restart)
  if [ "${1:-}" != "--keep-munge" ] && grep -qF -- "$mark" /etc/hosts; then
    awk -v m="$mark" 'substr($0, length($0) - length(m) + 1) != m' /etc/hosts > "$BASE/hosts.new" \
      && cat "$BASE/hosts.new" > /etc/hosts; rm -f "$BASE/hosts.new"
  fi
elif [ "${1:-}" = "--keep-munge" ]; then
  stop_pidfiles /run/mysqld/mysqld.pid
else
  stop_pidfiles /run/mysqld/mysqld.pid /run/munge/munged.pid
fi
exit 0
