#!/usr/bin/env bash
# start-slurm.sh - a real Slurm cluster on this one machine, for the Slurm tests.
#
# munged + slurmctld + slurmd node1..nodeN (default 2) on 127.0.0.1, each with fake GPUs
# (GRES files that are links to /dev/null, so jobs see CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS
# as on real GPU nodes), and CPU-only nodes after them (default 1: node3, no GRES) in a
# partition of their own (`cpu`), so a job lands there only when it asks (--partition=cpu);
# the default partition `debug` holds the GPU nodes. No cgroups, no systemd. Installs Debian's Slurm packages when missing
# (apt-get; needs root). Idempotent: a running cluster with the same config is left alone; a
# changed config restarts the Slurm daemons. Stop with stop-slurm.sh (by PID file).
# Measured facts behind each choice: /work/shared/reference/slurm.md.
# Tunables (env):
#   SLURM_BASE=/tmp/areal-slurm  state, logs, pid files, fake GPU links
#   SLURM_NODES=2                GPU nodes node1..nodeN, 1 to 32 (Slurm's multiple-slurmd: one
#                                slurmd per node name, all on 127.0.0.1, slurmd ports 17001+)
#   SLURM_CPU_NODES=1            CPU-only nodes after them (partition cpu), 0 to 8, 0: none
#   SLURM_NODE_PREFIX=node       the nodes' names: <prefix>1, <prefix>2, ... (a second cluster
#                                takes names of its own, so /etc/hosts holds both)
#   SLURM_CPUS=16                CPUs advertised per node (may exceed the real cores)
#   SLURM_GPUS=8                 fake GPUs per node
#   SLURM_GPU_TYPE=h100          their gres type (Gres=gpu:h100:8, as sites name theirs; the
#                                launcher's memory table reads it), empty: untyped (gpu:8)
#   SLURM_MEM=8000               RealMemory (MB) per node
#   SLURM_ACCOUNTING=1           1: MariaDB + slurmdbd too, so sacct knows finished jobs and
#                                steps (what real clusters have); 0: no accounting (sacct says
#                                "accounting storage is disabled"; saves ~20 s of install)
#   SLURM_WAIT=60                seconds to wait for all nodes to be idle
#   SLURM_ETC=/etc/slurm         where slurm.conf and gres.conf go; another folder (and other
#   SLURM_CTLD_PORT=6817         ports, base and node prefix) runs a second cluster beside the
#   SLURMD_PORT=17001            first: its commands then need SLURM_CONF=$SLURM_ETC/slurm.conf;
#                                it has no accounting by default and a munged of its own (its
#                                socket in SLURM_BASE); stop-slurm.sh with the same SLURM_ETC and
#                                SLURM_BASE stops it, never the usual cluster's daemons
# e.g. 32 nodes beside the usual cluster:
#   SLURM_ETC=/tmp/s32/etc SLURM_BASE=/tmp/s32 SLURM_CTLD_PORT=6917 SLURMD_PORT=17101 \
#   SLURM_NODES=32 SLURM_CPU_NODES=0 SLURM_NODE_PREFIX=s32n bash scripts/slurm/start-slurm.sh
set -euo pipefail

BASE=${SLURM_BASE:-/tmp/areal-slurm}
NODES=${SLURM_NODES:-2}
CPU_NODES=${SLURM_CPU_NODES:-1}
PREFIX=${SLURM_NODE_PREFIX:-node}
CPUS=${SLURM_CPUS:-16}
GPUS=${SLURM_GPUS:-8}
GPU_TYPE=${SLURM_GPU_TYPE-h100}
MEM=${SLURM_MEM:-8000}
WAIT=${SLURM_WAIT:-60}
HOST=$(hostname -s)
ETC=${SLURM_ETC:-/etc/slurm}
# the usual cluster keeps the accounting daemons; a second one has none unless asked
if [ "$ETC" = /etc/slurm ]; then ACCT=${SLURM_ACCOUNTING:-1}; else ACCT=${SLURM_ACCOUNTING:-0}; fi
CONF=$ETC/slurm.conf
GRES=$ETC/gres.conf
CTLD_PORT=${SLURM_CTLD_PORT:-6817}
NODE_PORT=${SLURMD_PORT:-17001}
export SLURM_CONF=$CONF  # the daemons and the commands below read this one
HERE=$(cd "$(dirname "$0")" && pwd)
T0=$SECONDS

log() { echo "[start-slurm] $*" >&2; }
[[ $NODES =~ ^[0-9]+$ ]] && [ "$NODES" -ge 1 ] && [ "$NODES" -le 32 ] \
  || { log "SLURM_NODES=$NODES: choose 1 to 32 (one slurmd each on this machine)"; exit 1; }
[[ $CPU_NODES =~ ^[0-9]+$ ]] && [ "$CPU_NODES" -le 8 ] \
  || { log "SLURM_CPU_NODES=$CPU_NODES: choose 0 to 8"; exit 1; }
[[ $PREFIX =~ ^[a-z][a-z0-9]{0,15}$ ]] \
  || { log "SLURM_NODE_PREFIX=$PREFIX: a lower-case letter, then up to 15 letters or digits"; exit 1; }
alive() {  # the pid file names a live slurm/munge/mariadb daemon
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null \
    && grep -Eq '^(slurmd|slurmctld|slurmdbd|munged|mariadbd)$' "/proc/$(cat "$1")/comm" 2>/dev/null; }
pidof_file() { for _ in $(seq 1 50); do [ -s "$1" ] && break; sleep 0.1; done; cat "$1" 2>/dev/null || echo '?'; }
[ "$(id -u)" = 0 ] || { log "must run as root (installs packages, starts daemons)"; exit 1; }

# ---------------------------------------------------------------- 1. install
PKGS="slurmctld slurmd slurm-client munge"
[ "$ACCT" = 1 ] && PKGS="$PKGS slurmdbd mariadb-server"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  log "installing$missing"
  tmp_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then        # keep dpkg from starting services
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d; tmp_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  for try in 1 2 3; do
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $missing >/dev/null && break
    [ $try = 3 ] && { log "apt-get failed"; exit 1; }; sleep 5
  done
  [ "$tmp_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  log "installed in $((SECONDS - T0)) s"
fi

# ---------------------------------------------------------------- 2. config
mkdir -p "$BASE"/state/ctld "$BASE"/log "$BASE"/fakedev "$ETC"
for ((g = 0; g < GPUS; g++)); do               # gres/gpu File= must be a char device:
  ln -sfn /dev/null "$BASE/fakedev/nvidia$g"    # plain files are dropped, /dev/null links work
done
NODELIST="$PREFIX[1-$NODES]"
GRES_SPEC="gpu:${GPU_TYPE:+$GPU_TYPE:}$GPUS"
ALL=$((NODES + CPU_NODES))
NODENAMES=$(seq -f "$PREFIX%g" 1 "$ALL" | tr '\n' ' ')
CPU_LINES=""
if [ "$CPU_NODES" -gt 0 ]; then  # no Gres: CPU-only, in a partition no job gets by default
  CPU_LIST="$PREFIX[$((NODES + 1))-$ALL]"
  CPU_LINES="NodeName=$CPU_LIST NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[$((NODE_PORT + NODES))-$((NODE_PORT + ALL - 1))] CPUs=$CPUS RealMemory=$MEM Feature=cpu State=UNKNOWN
PartitionName=cpu Nodes=$CPU_LIST Default=NO MaxTime=INFINITE State=UP"
fi
# a second cluster's munged is its own (socket, pid, key copy under BASE): it starts and stops
# with the cluster and never touches the usual cluster's
MUNGE_SOCKET=/run/munge/munge.socket.2; MUNGE_PID=/run/munge/munged.pid; MUNGE_AUTH=""
if [ "$ETC" != /etc/slurm ]; then
  MUNGE_SOCKET=$BASE/munge/munge.socket; MUNGE_PID=$BASE/munge/munged.pid
  MUNGE_AUTH=",socket=$MUNGE_SOCKET"
fi
# one /etc/hosts line per cluster, marked with its config folder (the usual one's: no folder)
HOSTS_MARK="# start-slurm nodes"; [ "$ETC" = /etc/slurm ] || HOSTS_MARK="# start-slurm cluster $ETC"
HOSTS_LINE="127.0.0.1 $NODENAMES $HOSTS_MARK"

if [ "$ACCT" = 1 ]; then
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux"
else
  ACCT_CONF="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
new_dbd=$(cat <<DBD
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
PidFile=$BASE/state/slurmdbd.pid
LogFile=$BASE/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
DBD
)
new_conf=$(cat <<CONF
# generated by scripts/slurm/start-slurm.sh
ClusterName=arealtest
SlurmctldHost=$HOST(127.0.0.1)
AuthType=auth/munge
AuthInfo=cred_expire=10$MUNGE_AUTH
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
StateSaveLocation=$BASE/state/ctld
SlurmdSpoolDir=$BASE/state/d/%n
SlurmctldPidFile=$BASE/state/slurmctld.pid
SlurmdPidFile=$BASE/state/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
$ACCT_CONF
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
MinJobAge=300
GresTypes=gpu
NodeName=$NODELIST NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[$NODE_PORT-$((NODE_PORT + NODES - 1))] CPUs=$CPUS RealMemory=$MEM Gres=$GRES_SPEC State=UNKNOWN
PartitionName=debug Nodes=$NODELIST Default=YES MaxTime=INFINITE State=UP
$CPU_LINES
CONF
)
new_gres=$(cat <<GRESCONF
AutoDetect=off
NodeName=$NODELIST Name=gpu ${GPU_TYPE:+Type=$GPU_TYPE }File=$BASE/fakedev/nvidia[0-$((GPUS - 1))]
GRESCONF
)
changed=0
if [ "$(cat "$CONF" 2>/dev/null)" != "$new_conf" ]; then printf '%s\n' "$new_conf" > "$CONF"; changed=1; fi
if [ "$(cat "$GRES" 2>/dev/null)" != "$new_gres" ]; then printf '%s\n' "$new_gres" > "$GRES"; changed=1; fi
if [ "$ACCT" = 1 ] && [ "$(cat "$ETC/slurmdbd.conf" 2>/dev/null)" != "$new_dbd" ]; then
  printf '%s\n' "$new_dbd" > "$ETC/slurmdbd.conf"; chmod 600 "$ETC/slurmdbd.conf"; changed=1
fi
# ---------------------------------------------------------------- 3. start
if [ "$changed" = 1 ] && { alive "$BASE/state/slurmctld.pid" || ls "$BASE"/state/slurmd-*.pid >/dev/null 2>&1; }; then
  log "config changed: restarting the Slurm daemons"
  bash "$HERE/stop-slurm.sh" --keep-munge
fi

# node names resolve to loopback (a job's MASTER_ADDR is a node name)
own_hosts_line() { awk -v m=" $HOSTS_MARK" -v keep="$1" \
  '(length($0) > length(m) && substr($0, length($0) - length(m) + 1) == m) != keep' /etc/hosts; }
if [ "$(own_hosts_line 0)" != "$HOSTS_LINE" ]; then
  { own_hosts_line 1; echo "$HOSTS_LINE"; } > "$BASE/hosts.new"
  cat "$BASE/hosts.new" > /etc/hosts; rm -f "$BASE/hosts.new"
fi

munge_ok() { munge -S "$MUNGE_SOCKET" -n 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }
if ! munge_ok; then
  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 600 /etc/munge/munge.key; }
  if [ "$ETC" = /etc/slurm ]; then
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge; chmod 755 /run/munge
    rm -f /run/munge/munge.socket.2.lock
    runuser -u munge -- /usr/sbin/munged
  else
    mkdir -p "$BASE/munge"; chown munge:munge "$BASE/munge"; chmod 755 "$BASE/munge"
    rm -f "$MUNGE_SOCKET.lock"
    runuser -u munge -- /usr/sbin/munged --socket="$MUNGE_SOCKET" --pid-file="$MUNGE_PID" \
      --log-file="$BASE/munge/munged.log" --seed-file="$BASE/munge/munged.seed"
  fi
  for _ in $(seq 1 50); do munge_ok && break; sleep 0.1; done
  log "munged started (pid $(pidof_file "$MUNGE_PID"))"
fi

if [ "$ACCT" = 1 ]; then
  if ! mariadb -e 'select 1' >/dev/null 2>&1; then
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null
    mkdir -p /run/mysqld; chown mysql:mysql /run/mysqld
    nohup /usr/sbin/mariadbd --user=mysql --innodb-buffer-pool-size=64M \
        > "$BASE/log/mariadb.log" 2>&1 < /dev/null &
    for _ in $(seq 1 100); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
    mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
      CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
    log "mariadbd started (pid $(pidof_file /run/mysqld/mysqld.pid))"
  fi
  if ! alive "$BASE/state/slurmdbd.pid"; then
    /usr/sbin/slurmdbd
    for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/6819) 2>/dev/null && break; sleep 0.1; done
    log "slurmdbd started (pid $(pidof_file "$BASE/state/slurmdbd.pid"))"
  fi
fi

# slurmctld keeps its state in $BASE/state/ctld, so job ids keep counting up across restarts
if ! alive "$BASE/state/slurmctld.pid"; then
  /usr/sbin/slurmctld
  log "slurmctld started (pid $(pidof_file "$BASE/state/slurmctld.pid"))"
fi

for n in $NODENAMES; do
  mkdir -p "$BASE/state/d/$n"
  alive "$BASE/state/slurmd-$n.pid" && continue
  /usr/sbin/slurmd -N "$n"
  log "slurmd $n started (pid $(pidof_file "$BASE/state/slurmd-$n.pid"))"
done

# ---------------------------------------------------------------- 4. wait until idle
deadline=$((SECONDS + WAIT)); resumed=0
while :; do
  states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u || true)
  bad=$(printf '%s\n' "$states" | awk 'NF==2 && $2!="idle" && $2!="mix" && $2!="alloc"')
  if [ -n "$states" ] && [ -z "$bad" ]; then break; fi
  if [ $resumed = 0 ] && [ $SECONDS -gt $((deadline - WAIT + 5)) ] && printf '%s\n' "$bad" | grep -Eq 'drain|down|inval|fail'; then
    scontrol update nodename="$(echo $NODENAMES | tr ' ' ,)" state=resume 2>/dev/null || true; resumed=1
  fi
  if [ $SECONDS -ge $deadline ]; then
    log "nodes not idle after ${WAIT}s:"; printf '%s\n' "$states" >&2
    sinfo -R >&2 || true; tail -20 "$BASE"/log/*.log >&2 || true
    exit 1
  fi
  sleep 0.2
done
log "cluster ready in $((SECONDS - T0)) s: $(sinfo -h -N -o '%N:%t:%G' | tr '\n' ' ')"
