#!/usr/bin/env bash
# triad-launch under a real SLURM (Debian's slurm-wlm) on localhost: the script writes a
# minimal slurm.conf (auth/none, proctrack/linuxproc, no cgroup), starts slurmctld and slurmd
# in a scratch folder on free ports, runs srun with one task per node and one task per rank,
# and stops the daemons.
source "$(dirname "$0")/common.sh" "$@"
cd "$SCRATCH"

[[ $(id -u) -eq 0 ]] || skip "slurmd must run as root to start jobs"
for b in slurmctld slurmd srun sinfo; do
  command -v $b >/dev/null || skip "$b is missing (apt-get install slurm-wlm)"
done
plugins=$(dirname "$(find /usr/lib -name auth_none.so -path '*slurm*' 2>/dev/null | head -1)")
[[ -f $plugins/auth_none.so && -f $plugins/cred_none.so ]] ||
  skip "this SLURM lacks auth/none and cred/none (a test cluster without munge needs them)"

mkdir -p state spool
ctld_port=$(free_port)
d_port=$(free_port)
while [[ $d_port == "$ctld_port" ]]; do d_port=$(free_port); done
cat >slurm.conf <<CONF
ClusterName=triadtest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$SCRATCH/state
SlurmdSpoolDir=$SCRATCH/spool
SlurmctldPidFile=$SCRATCH/slurmctld.pid
SlurmdPidFile=$SCRATCH/slurmd.pid
SlurmctldLogFile=$SCRATCH/slurmctld.log
SlurmdLogFile=$SCRATCH/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$SCRATCH/slurm.conf

slurmctld -D -i >ctld.out 2>&1 &
CLEANUP+=("kill $! ; sleep 0.3; kill -9 $!")
slurmd -D -N localhost >d.out 2>&1 &
CLEANUP+=("kill $! ; sleep 0.3; kill -9 $!")
up=0
for _ in $(seq 100); do
  if sinfo -h -o %t 2>/dev/null | grep -q idle; then
    up=1
    break
  fi
  sleep 0.2
done
if ((!up)); then
  tail -5 ctld.out d.out slurmctld.log slurmd.log 2>/dev/null
  skip "slurmctld/slurmd did not come up on ports $ctld_port/$d_port (logs above)"
fi
pass "slurmctld + slurmd up on localhost"

# 1. One task per node: the launcher spawns the node's two ranks (and makes its own token).
timeout 60 srun -N1 -n1 env -u TRIAD_JOB_TOKEN "$LAUNCH" --nproc-per-node 2 \
  --exec "$PROBE" --rendezvous >node.out 2>node.err || fail "srun -N1 -n1 exited $? ($(cat node.err))"
check_layout node.out 2 2
expect node.out "master=localhost:[0-9]+ token_len=32 "
pass "srun -N1 -n1 triad-launch --nproc-per-node 2"

# 2. One task per rank: each launcher runs its own rank; task 0 hosts the rendezvous.
export TRIAD_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(free_port)
timeout 60 srun -n2 "$LAUNCH" --master-port "$port" --exec "$PROBE" --rendezvous \
  >rank.out 2>rank.err || fail "srun -n2 exited $? ($(cat rank.err))"
check_layout rank.out 2 2
expect rank.out "master=localhost:$port token_len=32 "
pass "srun -n2 triad-launch (one task per rank)"

# 3. Fail-fast under srun: rank 1 exits 3, task 0's rank is stopped, both report it.
port=$(free_port)
start=$(now_ms)
timeout 60 srun -n2 "$LAUNCH" --master-port "$port" --exec "$PROBE" --fail-rank 1 --code 3 \
  --sleep-forever >fail.out 2>fail.err
rc=$?
took=$(($(now_ms) - start))
[[ $rc -eq 3 ]] || { cat fail.err; fail "srun exited $rc after rank 1 exited 3 (want 3)"; }
((took < 15000)) || fail "the job took $took ms to stop"
expect fail.err "triad-launch\[task 0\]: rank 1 \(pid [0-9]+ on host [^)]*\) exited with code 3; stopping the ranks of task 0"
pass "srun -n2 with rank 1 exiting 3 -> exit 3 ($took ms)"

# 4. One task per rank without a shared token: one clear error.
timeout 60 srun -n2 env -u TRIAD_JOB_TOKEN "$LAUNCH" --exec "$PROBE" >tok.out 2>tok.err
[[ $? -ne 0 ]] || fail "srun -n2 without TRIAD_JOB_TOKEN succeeded"
expect tok.err "TRIAD_JOB_TOKEN is not set, but this job has 2 launchers \(SLURM, one task per rank\)"
pass "srun -n2 without TRIAD_JOB_TOKEN is refused"
echo "PASS"
