# shellcheck shell=bash
# Sourced by cluster/local/up and down: whose cluster $D is. The owner is the process that ran `up` -- its parent,
# the shell or the test run, "pid:PID:START" (START: its start time in clock ticks, so a reused PID is not taken
# for it) -- or the token MTNLG_SLURM_OWNER. Written to $D/owner by `up`, removed by `down`. Needs D and ADOPT.

alive() {            # name pid: pid is still a $name of this cluster (its command line names $D)
  [ -d "/proc/$2" ] && [ "$(cat "/proc/$2/comm" 2>/dev/null)" = "$1" ] \
    && tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null | grep -qF "$D/"
}

start_time() {       # pid: its start time (field 22 of /proc/PID/stat, after the parenthesised command name)
  local stat f
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  read -ra f <<<"${stat##*) }"
  echo "${f[19]}"
}

my_owner() { echo "${MTNLG_SLURM_OWNER:-pid:$PPID:$(start_time "$PPID")}"; }

owner_alive() {      # token: the process it names still runs (a token of MTNLG_SLURM_OWNER counts as alive)
  local pid start
  [[ $1 =~ ^pid:([0-9]+):([0-9]+)$ ]] || return 0
  pid=${BASH_REMATCH[1]} start=${BASH_REMATCH[2]}
  [ "$(start_time "$pid" 2>/dev/null)" = "$start" ]
}

claim_owner() {      # this run owns $D from now on
  { my_owner; echo "started by: $(tr '\0' ' ' <"/proc/$PPID/cmdline" 2>/dev/null | cut -c1-200) (pid $PPID, in $PWD) at $(date -u +%FT%TZ)"; } >"$D/owner"
}

check_owner() {      # up|down: return if $D is this run's (or nobody's, or its owner has exited); exit 1 if another
  local verb=$1 theirs who         # live run's, unless adopting
  if [ -s "$D/owner" ]; then
    theirs=$(head -n 1 "$D/owner"); who=$(sed -n 2p "$D/owner")
    [ "$theirs" = "$(my_owner)" ] && return 0
    if ! owner_alive "$theirs"; then
      echo "the cluster in $D belonged to a run that has exited ($theirs; $who): taking it over"
      [ "$verb" = up ] && claim_owner
      return 0
    fi
  elif [ -s "$D/started.pids" ]; then
    theirs="unknown"; who="no $D/owner: started by an older cluster/local/up"
  else
    return 0
  fi
  if [ "$ADOPT" = 1 ]; then
    echo "adopting the cluster in $D of another run ($theirs; $who): MTNLG_SLURM_ADOPT=1 / --adopt"
    return 0
  fi
  cat >&2 <<MSG
cluster/local/$verb: refusing: the Slurm cluster in $D was started by another run, which is still running
  owner:    $theirs ($who)
  this run: $(my_owner)
Two runs on one cluster collide: the first to finish stops it (cluster/local/down) under the other's jobs. Give this
run its own cluster -- another MTNLG_SLURM_DIR and free ports (MTNLG_SLURM_PORT) -- or, knowing that, use this one
anyway: MTNLG_SLURM_ADOPT=1 or --adopt.
MSG
  exit 1
}
