#!/usr/bin/env bash
# triad-launch on this machine: the environment of 1..4 ranks, output prefixes, a failing
# rank's exit code, kill -9 of one rank, SIGTERM to the launcher, training ranks, and the
# errors a user can make.
source "$(dirname "$0")/common.sh" "$@"
cd "$SCRATCH"

# 1. Environment and rendezvous for N = 1..4 ranks.
for n in 1 2 3 4; do
  timeout 60 "$LAUNCH" --nproc-per-node "$n" --exec "$PROBE" --rendezvous >out.$n 2>err.$n ||
    fail "--nproc-per-node $n exited $? ($(cat err.$n))"
  check_layout out.$n "$n" "$n"
  expect_count out.$n "master=127\.0\.0\.1:[0-9]+ token_len=32 omp=1 " "$n"
done
pass "environment and rendezvous for 1..4 ranks"

# 2. Every line prefixed, stdout to stdout and stderr to stderr, a last line without newline.
timeout 30 "$LAUNCH" --nproc-per-node 2 --exec sh -c \
  'echo "out one $RANK"; echo "err one $RANK" >&2; echo "out two $RANK"; printf "tail $RANK"' \
  >out.p 2>err.p || fail "prefix run exited $?"
for r in 0 1; do
  expect out.p "^\[rank $r\] out one $r\$"
  expect out.p "^\[rank $r\] out two $r\$"
  expect out.p "^\[rank $r\] tail $r\$"
  expect err.p "^\[rank $r\] err one $r\$"
done
expect_count out.p "." 6
expect_not err.p "out|tail"
expect_not out.p "err one"
pass "output prefixed line by line"

# 3. A rank exiting 3: the launcher exits 3 and names the rank.
timeout 30 "$LAUNCH" --nproc-per-node 3 --exec "$PROBE" --fail-rank 2 --code 3 --sleep-forever \
  >out.f 2>err.f
rc=$?
[[ $rc -eq 3 ]] || { cat err.f; fail "a rank exiting 3 made the launcher exit $rc"; }
expect err.f "^triad-launch: rank 2 \(pid [0-9]+\) exited with code 3; stopping the other ranks"
expect err.f "^\[rank 2\] probe rank=2 failing with code 3"
pass "rank exiting 3 -> launcher exits 3 and names it"

# 4. kill -9 of one rank: the others (sleeping forever) are stopped within 10 s.
start_bg "$LAUNCH" --nproc-per-node 4 --exec "$PROBE" --sleep-forever >out.k 2>err.k
launcher=$BG
for _ in $(seq 100); do
  [[ $(grep -c "probe rank=" out.k) -eq 4 ]] && break
  sleep 0.1
done
expect_count out.k "probe rank=" 4
victim=$(sed -n 's/^\[rank 1\] probe .* pid=\([0-9]*\)$/\1/p' out.k)
others=$(sed -n 's/^\[rank [023]\] probe .* pid=\([0-9]*\)$/\1/p' out.k)
start=$(now_ms)
kill -9 "$victim"
wait $launcher
rc=$?
took=$(($(now_ms) - start))
[[ $rc -eq 137 ]] || { cat err.k; fail "launcher exited $rc after kill -9 of a rank (want 137)"; }
((took < 10000)) || fail "the other ranks took $took ms to stop"
expect err.k "^triad-launch: rank 1 \(pid $victim\) was killed by signal 9 \(SIGKILL\); stopping the other ranks"
for p in $others; do
  kill -0 "$p" 2>/dev/null && fail "rank pid $p still runs after the launcher exited"
done
pass "kill -9 of a rank stops the others in $took ms, exit 137"

# 5. SIGTERM to the launcher reaches every rank.
start_bg "$LAUNCH" --nproc-per-node 3 --exec "$PROBE" --trap-term --sleep-forever >out.t 2>err.t
launcher=$BG
for _ in $(seq 100); do
  [[ $(grep -c "probe rank=" out.t) -eq 3 ]] && break
  sleep 0.1
done
kill -TERM $launcher
wait $launcher
rc=$?
[[ $rc -eq 143 ]] || { cat err.t; fail "launcher exited $rc after SIGTERM (want 143)"; }
for r in 0 1 2; do expect out.t "^\[rank $r\] probe rank=$r got SIGTERM"; done
expect err.t "^triad-launch: received SIGTERM; passing it to the ranks"
pass "SIGTERM reaches every rank, exit 143"

# 6. A rank ignoring SIGTERM gets SIGKILL after --stop-grace.
start_bg "$LAUNCH" --nproc-per-node 2 --stop-grace 1 --exec sh -c \
  'trap "" TERM; echo up; while :; do sleep 0.1; done' >out.g 2>err.g
launcher=$BG
for _ in $(seq 100); do
  [[ $(grep -c up out.g) -eq 2 ]] && break
  sleep 0.1
done
start=$(now_ms)
kill -TERM $launcher
wait $launcher
took=$(($(now_ms) - start))
expect err.g "did not stop within 1 s; sending SIGKILL"
((took < 5000)) || fail "SIGKILL after a 1 s grace took $took ms"
pass "SIGKILL after --stop-grace ($took ms)"

# 7. Training ranks: the launcher starts itself in worker mode; the two ranks train one
# data-parallel job (global batch 2 x 16), rank 0 alone logs and writes the output folder.
[[ -f $CONFIGS/gpt-tiny.yaml ]] || fail "no gpt-tiny.yaml in the configs folder '$CONFIGS'"
# UCX on shared memory only, never a real network interface.
export UCX_TLS=sm,self UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
timeout 120 "$LAUNCH" --nproc-per-node 2 "$CONFIGS/gpt-tiny.yaml" --set training.train_iters=2 \
  --set output.dir="$SCRATCH/run" >out.w 2>err.w
rc=$?
cat out.w err.w >all.w
[[ $rc -eq 0 ]] || {
  cat all.w
  fail "training with 2 ranks exited $rc"
}
expect all.w "^\[rank 0\] .*batch: global 32 = micro 16 x accumulation 1 x data-parallel 2\$" \
  "rank 0's batch line with data-parallel 2"
expect_count all.w "^\[rank 0\] .*step +[12]/2 \| loss [0-9.]+ " 2
expect all.w "^\[rank 0\] .*done: 2 steps \| loss [0-9.]+ -> [0-9.]+ " "rank 0's training summary"
expect_not all.w "^\[rank 1\]" "output from rank 1 (only rank 0 logs)"
expect "$SCRATCH/run/config.yaml" "^  data_parallel_size: 2\$" "data_parallel_size 2 in the resolved config"
expect_count "$SCRATCH/run/metrics.jsonl" "." 2
for s in 1 2; do
  expect "$SCRATCH/run/metrics.jsonl" "\"loss\":[0-9.]+,.*\"step\":$s," "step $s in metrics.jsonl"
done
timeout 60 "$LAUNCH" --nproc-per-node 2 "$CONFIGS/gpt-tiny.yaml" --dry-run >out.d 2>err.d ||
  fail "--dry-run with 2 ranks exited $? ($(cat err.d))"
expect_count out.d "^parameters:" 1
pass "2 training ranks run 2 data-parallel steps; dry run prints once"

# 7b. A stuck rank (SIGSTOP) ends the job within twice the collective timeout; the launcher's
# watchdog names the stopped rank and what the other waited for, once; the waiting rank does not
# spin a core meanwhile.
start_bg "$LAUNCH" --collective-timeout 4 --stop-grace 1 --nproc-per-node 2 \
  "$CONFIGS/gpt-tiny.yaml" --set training.train_iters=100000 --set output.dir="$SCRATCH/stuck" \
  >out.s 2>err.s
job=$BG
for _ in $(seq 300); do
  grep -q "step  *2/" out.s err.s 2>/dev/null && break
  sleep 0.1
done
worker=$(pgrep -f -- "--worker .*output.dir=$SCRATCH/stuck" | tail -1)
[[ -n $worker ]] || fail "no training rank to stop ($(cat err.s))"
stopped=$(pgrep -f -- "--worker .*output.dir=$SCRATCH/stuck" | while read -r p; do
  grep -qz "^RANK=1$" /proc/$p/environ 2>/dev/null && echo $p; done | head -1)
[[ -n $stopped ]] || fail "no rank 1 among the training ranks"
waiting=$(pgrep -f -- "--worker .*output.dir=$SCRATCH/stuck" | while read -r p; do
  grep -qz "^RANK=0$" /proc/$p/environ 2>/dev/null && echo $p; done | head -1)
t0=$(date +%s)
kill -STOP "$stopped"
# The waiting rank naps rather than spinning: under 25% of a core over 2 s of its wait.
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
before=$(ticks "$waiting")
sleep 2
used=$(($(ticks "$waiting") - before))
hz=$(getconf CLK_TCK)
((used * 100 <= 25 * 2 * hz)) || fail "rank 0 used $used of $((2 * hz)) ticks while waiting"
wait $job
rc=$?
took=$(($(date +%s) - t0))
kill -CONT "$stopped" 2>/dev/null
[[ $rc -ne 0 ]] || fail "the job with a stopped rank exited 0"
((took <= 8)) || fail "the job with a stopped rank took ${took} s to end (collective timeout 4 s)"
expect err.s "rank 1 \(pid $stopped\) stopped making progress: no sign of life for [0-9.]+ s at step [0-9]+ \(the process is stopped" \
  "the launcher's verdict naming the stopped rank 1"
expect err.s "rank 0 has waited [0-9.]+ s for all_reduce\([0-9]+ x fp32\) over the data-parallel group \(world ranks 0, 1\)" \
  "what rank 0 waited for"
expect_count err.s "stopped making progress" 1
pass "a stopped rank ends the job in ${took} s (timeout 4 s), named in the error; the waiting rank used $used of $((2 * hz)) ticks"

# 8. Mistakes get one clear message and exit 2.
"$LAUNCH" --nproc-per-node 2 --exec ./no-such-program >out.e 2>err.e
[[ $? -eq 2 ]] || fail "a missing program did not exit 2"
expect err.e "^triad-launch: error: --exec: '\./no-such-program' does not exist"
env -u TRIAD_JOB_TOKEN "$LAUNCH" --nnodes 2 --node-rank 0 --exec true >out.e 2>err.e
[[ $? -eq 2 ]] || fail "--nnodes 2 without a token did not exit 2"
expect err.e "TRIAD_JOB_TOKEN is not set.*export TRIAD_JOB_TOKEN="
port=$(free_port)
start_bg "$LAUNCH" --master-port "$port" --exec "$PROBE" --sleep-forever >out.b 2>err.b
holder=$BG
for _ in $(seq 100); do
  grep -q "probe rank=0" out.b && break
  sleep 0.1
done
"$LAUNCH" --master-port "$port" --exec true >out.e 2>err.e
[[ $? -eq 2 ]] || fail "a port in use did not exit 2"
expect err.e "cannot listen on 127\.0\.0\.1:$port: the port is already in use"
kill -TERM $holder
wait $holder
"$LAUNCH" --nproc-per-node 2 >out.e 2>err.e
[[ $? -eq 2 ]] || fail "no CONFIG did not exit 2"
expect err.e "no CONFIG given"
pass "mistakes exit 2 with one message"
echo "PASS"
