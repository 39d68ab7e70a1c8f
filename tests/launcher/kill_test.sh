#!/usr/bin/env bash
# kill -9 of one training rank of a two-launcher job (two "nodes" on this host, one rank each,
# UCX between them), 20 times at random moments of training: every time both launchers end
# with 137, both name the killed rank (by pid, node and signal), and no process prints a
# backtrace or a crash: the survivor is stopped before its transport can fail on the dead peer,
# or fails with one line.
source "$(dirname "$0")/common.sh" "$@"
cd "$SCRATCH"
ROUNDS=${TRIAD_KILL_ROUNDS:-20}
export TRIAD_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')

for round in $(seq "$ROUNDS"); do
  port=$(free_port)
  rm -rf run
  for node in 0 1; do
    start_bg "$LAUNCH" --nnodes 2 --node-rank $node --nproc-per-node 1 --master-addr 127.0.0.1 \
      --master-port "$port" "$CONFIGS/gpt-tiny.yaml" --set training.train_iters=100000 \
      --set output.dir="$SCRATCH/run" >n$node.out 2>n$node.err
    pids[node]=$BG
  done
  for _ in $(seq 300); do
    grep -q "step  *1/" n0.out n0.err 2>/dev/null && break
    sleep 0.1
  done
  grep -q "step  *1/" n0.out n0.err || fail "round $round: no step within 30 s ($(cat n0.err n1.err))"
  victim=$((RANDOM % 2))
  pid=$(pgrep -f -- "--worker .*output.dir=$SCRATCH/run" | while read -r p; do
    grep -qz "^RANK=$victim$" /proc/$p/environ 2>/dev/null && echo $p; done | head -1)
  [[ -n $pid ]] || fail "round $round: no process for rank $victim"
  sleep "0.$((RANDOM % 10))"
  kill -9 "$pid"
  wait ${pids[0]}
  rc0=$?
  wait ${pids[1]}
  rc1=$?
  cat n0.out n0.err n1.out n1.err >all.txt
  [[ $rc0 -eq 137 && $rc1 -eq 137 ]] || {
    cat all.txt
    fail "round $round: exit codes $rc0/$rc1 after kill -9 of rank $victim (want 137/137)"
  }
  for node in 0 1; do
    expect n$node.err "rank $victim \(pid $pid on node $victim, host [^)]*\) was killed by signal 9 \(SIGKILL\)" \
      "round $round: node $node's launcher naming rank $victim (pid $pid) as killed"
  done
  expect_not all.txt "backtrace|Caught signal|Segmentation|Aborted|internal error|core dumped|^\[rank [01]\] +[0-9]+ +0x" \
    "round $round: a crash or a backtrace after kill -9 of rank $victim"
done
pass "$ROUNDS kill -9s of a training rank of a two-node job: always the killed rank named, never a backtrace"
