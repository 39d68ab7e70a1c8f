#!/usr/bin/env bash
# triad-launch under Open MPI's mpirun: one task per rank, the layout from OMPI_COMM_WORLD_*.
source "$(dirname "$0")/common.sh" "$@"
cd "$SCRATCH"

command -v mpirun >/dev/null || skip "mpirun is missing (apt-get install openmpi-bin)"
mpirun --version 2>/dev/null | grep -q "Open MPI" || skip "mpirun is not Open MPI's"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp)
export TRIAD_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')

port=$(free_port)
timeout 60 "${MPIRUN[@]}" -n 3 "$LAUNCH" --master-port "$port" --exec "$PROBE" --rendezvous \
  >run.out 2>run.err || fail "mpirun -n 3 exited $? ($(cat run.err))"
check_layout run.out 3 3
expect run.out "master=127\.0\.0\.1:$port token_len=32 "
pass "mpirun -n 3 triad-launch: environment from OMPI_COMM_WORLD_*"

port=$(free_port)
timeout 60 "${MPIRUN[@]}" -n 2 "$LAUNCH" --master-port "$port" --exec "$PROBE" --kill-rank 0 \
  --sleep-forever >fail.out 2>fail.err
rc=$?
[[ $rc -ne 0 ]] || fail "mpirun exited 0 though rank 0 was killed"
expect fail.err "triad-launch\[task 0\]: rank 0 \(pid [0-9]+ on host [^)]*\) was killed by signal 9 \(SIGKILL\)"
pass "mpirun -n 2 with rank 0 killed -> exit $rc, reported"
echo "PASS"
