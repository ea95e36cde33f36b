#!/usr/bin/env bash
# A single-host Slurm sandbox for dltsched's Slurm daemon and its `slurm` tests.
#
#   bash scripts/slurm-sandbox.sh         install (once), configure and start; idempotent
#   bash scripts/slurm-sandbox.sh stop    stop the daemons it started (the state dir stays)
#   bash scripts/slurm-sandbox.sh env     print the `export SLURM_CONF=...` line for this sandbox
#
# Installs Debian's slurm-wlm and munge (needs root and apt), writes a configuration with
# $DLTSCHED_SLURM_NODES fake nodes (default 2) of $DLTSCHED_SLURM_GPUS fake GPUs each (default 4,
# gres type v100, no device files), all on this host (one slurmd per node, each on its own port),
# one partition `dltsched`, sched/backfill. Everything lives under $DLTSCHED_SLURM_DIR
# (default /tmp/dltsched-slurm): its own munge key and socket, spool, state, logs; ports 16817..
# Nothing outside that folder is configured or started, and nothing is reachable from elsewhere.
set -euo pipefail

DIR=${DLTSCHED_SLURM_DIR:-/tmp/dltsched-slurm}
NODES=${DLTSCHED_SLURM_NODES:-2}
GPUS=${DLTSCHED_SLURM_GPUS:-4}
GPU_TYPE=${DLTSCHED_SLURM_GPU_TYPE:-v100}
CTLD_PORT=${DLTSCHED_SLURM_PORT:-16817}
CONF=$DIR/etc/slurm.conf
export SLURM_CONF=$CONF

log() { echo "slurm-sandbox: $*" >&2; }

stop_pidfile() {  # stop the one process whose id is in $1, if it still runs
    local f=$1 pid
    [[ -f $f ]] || return 0
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

stop_all() {
    for i in $(seq "$NODES"); do stop_pidfile "$DIR/run/slurmd-dl$i.pid"; done
    stop_pidfile "$DIR/run/slurmctld.pid"
    stop_pidfile "$DIR/run/munged.pid"
    log "stopped"
}

case "${1:-start}" in
    stop) stop_all; exit 0 ;;
    env) echo "export SLURM_CONF=$CONF"; exit 0 ;;
    start) ;;
    *) echo "usage: $0 [start|stop|env]" >&2; exit 2 ;;
esac

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    [[ $(id -u) == 0 ]] || { echo "slurm-sandbox: slurm-wlm and munge are missing; run as root to install" >&2; exit 2; }
    log "installing slurm-wlm and munge"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge
fi

mkdir -p "$DIR"/{etc,run,log,ctld,munge} && chmod 700 "$DIR/munge"
for i in $(seq "$NODES"); do mkdir -p "$DIR/spool/dl$i"; done
HOST=$(hostname -s)
ME=$(id -un)

# --- munge: its own key and socket, so the host's munge (if any) is left alone
if [[ ! -f $DIR/munge/munge.key ]]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 status=none
    chmod 400 "$DIR/munge/munge.key"
fi
SOCK=$DIR/munge/munge.socket.2
if ! { [[ -f $DIR/run/munged.pid ]] && kill -0 "$(cat "$DIR/run/munged.pid")" 2>/dev/null; }; then
    munged --force --key-file="$DIR/munge/munge.key" --socket="$SOCK" --pid-file="$DIR/run/munged.pid" \
        --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
fi

# --- configuration (rewritten each start; same inputs, same files; running daemons re-read a change)
OLD_SUM=$(cat "$CONF" "$DIR/etc/gres.conf" 2>/dev/null | md5sum)
cat >"$CONF" <<EOF
# written by scripts/slurm-sandbox.sh: single-host sandbox with fake GPUs
ClusterName=dltsched
SlurmctldHost=$HOST
SlurmUser=$ME
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
SlurmctldPort=$CTLD_PORT
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PriorityType=priority/basic
GresTypes=gpu
ReturnToService=2
JobRequeue=1
MinJobAge=3600
KillWait=2
# a job may run up to 2 minutes past its time limit before it is killed: the sandbox's jobs start Python and
# torch on a shared CPU, and their limits (which Slurm's backfill plans with) are their lengths, not more
OverTimeLimit=2
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
EOF
: >"$DIR/etc/gres.conf"
NODE_LIST=""
for i in $(seq "$NODES"); do
    echo "NodeName=dl$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((CTLD_PORT + i)) CPUs=8 RealMemory=16000 Gres=gpu:$GPU_TYPE:$GPUS State=UNKNOWN" >>"$CONF"
    # Slurm 22.05 drops a GPU gres without File= and wants a device there: placeholders that are
    # the null device (char 1:3) stand in for /dev/nvidiaN; nothing opens them
    mkdir -p "$DIR/dev/dl$i"
    for g in $(seq 0 $((GPUS - 1))); do
        f=$DIR/dev/dl$i/gpu$g
        [[ -c $f ]] || { rm -f "$f"; mknod -m 666 "$f" c 1 3; }
    done
    echo "NodeName=dl$i Name=gpu Type=$GPU_TYPE File=$DIR/dev/dl$i/gpu[0-$((GPUS - 1))]" >>"$DIR/etc/gres.conf"
    NODE_LIST+="${NODE_LIST:+,}dl$i"
done
echo "PartitionName=dltsched Nodes=$NODE_LIST Default=YES MaxTime=INFINITE State=UP" >>"$CONF"

# --- daemons (started only when not running)
running() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
if running "$DIR/run/slurmctld.pid" && [[ $OLD_SUM != $(cat "$CONF" "$DIR/etc/gres.conf" | md5sum) ]]; then
    log "configuration changed: scontrol reconfigure"
    scontrol reconfigure || true
fi
running "$DIR/run/slurmctld.pid" || slurmctld -f "$CONF"
for i in $(seq "$NODES"); do
    running "$DIR/run/slurmd-dl$i.pid" || slurmd -f "$CONF" -N "dl$i"
done

# a node drained by an earlier configuration of this sandbox comes back
for _ in $(seq 10); do sinfo -h >/dev/null 2>&1 && break; sleep 0.5; done
for n in $(sinfo -h -p dltsched -N -t drain,drng,inval -o '%N' 2>/dev/null | sort -u); do
    scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
done
for _ in $(seq 60); do
    if [[ $(sinfo -h -p dltsched -o '%t' 2>/dev/null | sort -u | tr -d '\n') == idle ]] \
        || sinfo -h -p dltsched -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
        if ! sinfo -h -p dltsched -o '%t' | grep -qvE '^(idle|mix|alloc)$'; then
            log "up: $(sinfo -h -p dltsched -o '%D nodes %t, gres %G')"
            echo "export SLURM_CONF=$CONF"
            exit 0
        fi
    fi
    sleep 1
done
log "nodes did not come up; see $DIR/log/"
sinfo -p dltsched -N -l >&2 || true
exit 1
