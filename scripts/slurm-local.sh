#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the `slurm`-marked tests and for trying
# `--launcher slurm` by hand (Debian, as root).
#
#   scripts/slurm-local.sh start   install what is missing, configure, start, wait for idle
#   scripts/slurm-local.sh stop    end the daemons this script started, nothing else
#   scripts/slurm-local.sh env     print the export line the clients need (SLURM_CONF)
#
# Everything lives in $CL_BENCH_SLURM_DIR (default /tmp/cl-bench-slurm): the
# configuration (slurm.conf, slurmdbd.conf), a private MariaDB data folder on
# 127.0.0.1:$CL_BENCH_SLURM_DB_PORT (default 3307), state, logs and the pid of every
# daemon started. Nothing is written under /etc/slurm: clients find the configuration
# through SLURM_CONF. The cluster has this machine's cores and memory, one partition
# `debug` (the default), requeue on preemption (JobRequeue=0, as many sites have it: a
# job is requeued only when it asks with --requeue), accounting through slurmdbd, so
# sacct and submitit see real job states (TIMEOUT, PREEMPTED, REQUEUED...).
set -euo pipefail

DIR=${CL_BENCH_SLURM_DIR:-/tmp/cl-bench-slurm}
DB_PORT=${CL_BENCH_SLURM_DB_PORT:-3307}
CTLD_PORT=${CL_BENCH_SLURM_CTLD_PORT:-6817}
NODE_PORT=${CL_BENCH_SLURM_NODE_PORT:-6818}
DBD_PORT=${CL_BENCH_SLURM_DBD_PORT:-6819}
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
DB_PASS=cl-bench-local
HOST=$(hostname -s)

say() { echo "slurm-local: $*" >&2; }
die() { say "$*"; exit 2; }

need_root() {
    [ "$(id -u)" = 0 ] || die "start and stop need root (they install Debian packages and run \
the daemons as root); run it with sudo, or skip the slurm-marked tests."
}

install_missing() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} = 0 ] && return
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install them \
with this system's package manager."
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}

write_config() {
    local cpus mem
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10 ))
    mkdir -p "$DIR"/{state,spool,log,db,run}
    cat > "$DIR/slurm.conf" <<EOF
ClusterName=clbench
SlurmctldHost=$HOST
SlurmctldPort=$CTLD_PORT
SlurmdPort=$NODE_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$HOST
AccountingStoragePort=$DBD_PORT
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
JobRequeue=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
MinJobAge=3600
KillWait=10
InactiveLimit=0
DefMemPerCPU=$(( mem / cpus ))
NodeName=$HOST CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
    cat > "$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=$HOST
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$DIR/slurmdbd.conf"
    printf 'export SLURM_CONF=%s/slurm.conf\n' "$DIR" > "$DIR/env"
}

started() { echo "$1 $2" >> "$DIR/run/started"; }

alive() { [ -f "$DIR/run/$1.pid" ] && kill -0 "$(cat "$DIR/run/$1.pid")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...
    local limit=$1 what=$2 i
    shift 2
    for ((i = 0; i < limit * 2; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "$what did not come up within ${limit}s; logs in $DIR/log"
}

start_munge() {
    if munge -n </dev/null >/dev/null 2>&1; then return; fi   # a munged already answers
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
    wait_for 10 munged sh -c 'munge -n </dev/null | unmunge'
    started munged "$(cat /run/munge/munged.pid)"
}

port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start_db() {
    port_free "$DB_PORT" || die "port $DB_PORT (MariaDB) is in use, perhaps by a cluster \
started earlier and never stopped: run '$0 stop' with its CL_BENCH_SLURM_DIR, or set \
CL_BENCH_SLURM_DB_PORT to a free port."
    for port in "$CTLD_PORT" "$NODE_PORT" "$DBD_PORT"; do
        port_free "$port" || die "port $port (Slurm) is in use, perhaps by a cluster started \
earlier and never stopped: stop it, or set CL_BENCH_SLURM_CTLD_PORT, _NODE_PORT, _DBD_PORT."
    done
    if ! [ -d "$DIR/db/mysql" ]; then
        mariadb-install-db --datadir="$DIR/db" --user=root --auth-root-authentication-method=socket \
            >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $DIR/log/mariadb-install.log"
    fi
    /usr/sbin/mariadbd --no-defaults --datadir="$DIR/db" --user=root --port="$DB_PORT" \
        --bind-address=127.0.0.1 --socket="$DIR/run/mariadb.sock" \
        --pid-file="$DIR/run/mariadb.pid" --log-error="$DIR/log/mariadb.log" \
        --skip-log-bin --innodb-buffer-pool-size=64M &
    wait_for 300 MariaDB mariadb --socket="$DIR/run/mariadb.sock" -e "select 1"
    started mariadb "$(cat "$DIR/run/mariadb.pid")"
    mariadb --socket="$DIR/run/mariadb.sock" -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        SET GLOBAL innodb_lock_wait_timeout = 900;"
}

start_slurm() {
    export SLURM_CONF=$DIR/slurm.conf
    /usr/sbin/slurmdbd
    wait_for 120 slurmdbd alive slurmdbd
    started slurmdbd "$(cat "$DIR/run/slurmdbd.pid")"
    wait_for 120 "slurmdbd's port" sh -c "sacctmgr -i list cluster >/dev/null"
    sacctmgr -i add cluster clbench >/dev/null 2>&1 || true
    /usr/sbin/slurmctld
    wait_for 120 slurmctld alive slurmctld
    started slurmctld "$(cat "$DIR/run/slurmctld.pid")"
    /usr/sbin/slurmd
    wait_for 120 slurmd alive slurmd
    started slurmd "$(cat "$DIR/run/slurmd.pid")"
    wait_for 180 "the node (idle in sinfo)" sh -c "sinfo -h -o %t | grep -qx idle"
}

start() {
    need_root
    if [ -s "$DIR/run/started" ]; then
        die "$DIR/run/started lists daemons of an earlier start; run '$0 stop' first."
    fi
    install_missing
    write_config
    : > "$DIR/run/started"
    trap 'say "start failed; stopping what it started"; stop' ERR
    start_munge
    start_db
    start_slurm
    trap - ERR
    say "up: $(SLURM_CONF=$DIR/slurm.conf sinfo -h -o '%P %D node(s) %t %c cpus %m MB'); \
clients need: $(cat "$DIR/env")"
}

cancel_jobs() {  # a job's slurmstepd outlives slurmd: cancel every job while the daemons run
    local i
    export SLURM_CONF=$DIR/slurm.conf
    alive slurmctld || return 0
    [ -z "$(squeue -h -o %i 2>/dev/null)" ] && return 0
    say "cancelling the jobs still queued or running"
    scancel --full --quiet $(squeue -h -o %i) 2>/dev/null || true
    for ((i = 0; i < 120; i++)); do
        [ -z "$(squeue -h -o %i 2>/dev/null)" ] && return 0
        sleep 0.5
    done
    say "jobs still listed after 60 s: $(squeue -h -o '%i %T' | tr '\n' ' ')"
}

stop() {
    need_root
    local list=$DIR/run/started name pid i
    [ -f "$list" ] || { say "nothing started here ($list absent)"; return 0; }
    cancel_jobs
    # the reverse order of starting: slurmd, slurmctld, slurmdbd, MariaDB, munged
    tac "$list" | while read -r name pid; do
        kill -0 "$pid" 2>/dev/null || continue
        kill "$pid" 2>/dev/null || true
        for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$pid" 2>/dev/null && { say "$name ($pid) ignored SIGTERM; SIGKILL"; kill -9 "$pid" || true; }
        say "stopped $name ($pid)"
    done
    rm -f "$list"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    env) cat "$DIR/env" ;;
    *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
