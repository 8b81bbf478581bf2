#!/bin/bash
# A two-node Slurm cluster on this one machine, to run cluster/*.sbatch for real (DESIGN.md section 7).
#
#   sudo cluster/local-slurm.sh start      # munge + slurmctld + slurmd n1, n2 (simulated nodes, NodeAddr 127.0.0.1)
#   export SLURM_CONF=/tmp/mtnlg-slurm/slurm.conf
#   sbatch --wait cluster/tiny-3d.sbatch   # TP2 x PP2 x DP2: 8 srun tasks on n1, n2 -> runs/tiny-3d/
#   sudo cluster/local-slurm.sh stop       # cancels jobs, stops the daemons by their recorded PIDs
#
# Needs root and Debian's packages: apt-get install slurmd slurmctld slurm-client munge (Slurm 22.05 seen working).
set -euo pipefail
D=${MTNLG_SLURM_DIR:-/tmp/mtnlg-slurm}
CPUS=${MTNLG_SLURM_CPUS:-4}            # per simulated node; may exceed the real cores (config_overrides)
export SLURM_CONF=$D/slurm.conf

start() {
  for b in munged slurmctld slurmd sbatch; do
    command -v $b >/dev/null || { echo "missing $b: apt-get install slurmd slurmctld slurm-client munge" >&2; exit 1; }
  done
  mkdir -p $D/state $D/spooln1 $D/spooln2 $D/log
  cat > $SLURM_CONF <<CONF
ClusterName=mtnlg-local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=6917
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MinJobAge=5
SlurmdParameters=config_overrides
NodeName=n1 NodeAddr=127.0.0.1 Port=6918 CPUs=$CPUS State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 Port=6919 CPUs=$CPUS State=UNKNOWN
PartitionName=cpu Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  mkdir -p /run/munge && chown munge:munge /run/munge
  [ -f /etc/munge/munge.key ] || { mungekey -c 2>/dev/null || /usr/sbin/create-munge-key -f; chown munge:munge /etc/munge/munge.key; }
  pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged
  slurmctld -f $SLURM_CONF
  sleep 1
  for n in n1 n2; do slurmd -f $SLURM_CONF -N $n; done
  for _ in $(seq 20); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.5; done
  sinfo
  echo "export SLURM_CONF=$SLURM_CONF"
}

stop() {
  scancel --full $(squeue -h -o %i 2>/dev/null) 2>/dev/null || true
  for f in $D/slurmd-n1.pid $D/slurmd-n2.pid $D/slurmctld.pid; do
    [ -f $f ] && kill $(cat $f) 2>/dev/null || true
  done
  echo "stopped (munged left running; its PID is in /run/munge/munged.pid)"
}

case "${1:-}" in start) start ;; stop) stop ;; *) echo "usage: $0 start|stop" >&2; exit 2 ;; esac
