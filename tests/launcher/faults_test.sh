#!/usr/bin/env bash
# Faults of the 3D layouts, in bounded rounds (TRIAD_FAULT_ROUNDS, default 2 per case):
#   zero3  kill -9 of one rank of dp 2 ZeRO-3 at a random moment of training (every layer's
#          weights are gathered and its gradients reduce-scattered, so most moments are inside
#          a collective);
#   pp2    kill -9 of one stage of pp 2 at a random moment (most are a send or a receive of
#          activations or gradients);
#   save   kill -9 of one rank of tp 2 x pp 2 while it saves a checkpoint every step;
#   term   SIGTERM to the launcher of pp 2.
# Each round: every rank ends within the launcher's bound (the test gives it 60 s), the
# launcher names the rank that died first (by pid and signal) or, on SIGTERM, the step it
# stopped after; no backtrace; and where checkpoints were saved, the newest verifies
# (triad-checkpoint verify) and a --resume from it trains two more steps.
source "$(dirname "$0")/common.sh" "$@"
cd "$SCRATCH"
ROUNDS=${TRIAD_FAULT_ROUNDS:-2}
CKPT_TOOL=$(dirname "$LAUNCH")/triad-checkpoint
export UCX_TLS=sm,self UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
CRASH="backtrace|Caught signal|Segmentation|Aborted|internal error|core dumped|terminate called"

# launch NAME RANKS [--set ...]: a long training job in the background (JOB its pid), output in
# NAME/, its log NAME.log.
launch() {
  local name=$1 n=$2
  shift 2
  rm -rf "$name" "$name.log"
  start_bg "$LAUNCH" --nproc-per-node "$n" "$CONFIGS/gpt-tiny.yaml" --set model.num_layers=4 \
    --set training.train_iters=100000 --set training.log_interval=1 \
    --set output.dir="$SCRATCH/$name" "$@" >"$name.log" 2>&1
  JOB=$BG
}

# wait_for FILE REGEX WHAT: up to 60 s for REGEX to appear in FILE.
wait_for() {
  for _ in $(seq 600); do
    grep -Eq -- "$2" "$1" 2>/dev/null && return
    sleep 0.1
  done
  cat "$1"
  fail "$3: nothing matched /$2/ within 60 s"
}

# rank_pid NAME RANK: the pid of that rank's worker.
rank_pid() {
  pgrep -f -- "--worker .*output.dir=$SCRATCH/$1" | while read -r p; do
    grep -qz "^RANK=$2$" /proc/"$p"/environ 2>/dev/null && echo "$p"
  done | head -1
}

# ends_within JOB SECONDS WHAT: the job's exit code, failing when it outlives SECONDS.
ends_within() {
  local job=$1 limit=$2
  for _ in $(seq $((limit * 10))); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$job" 2>/dev/null && fail "$3: the job still runs $limit s after the fault"
  wait "$job"
}

# kill_round NAME RANKS WHAT [--set ...]: kill -9 of a random rank once training runs.
kill_round() {
  local name=$1 n=$2 what=$3 victim pid rc
  shift 3
  launch "$name" "$n" "$@"
  wait_for "$name.log" "step +2/" "$what"
  victim=$((RANDOM % n))
  pid=$(rank_pid "$name" $victim)
  [[ -n $pid ]] || fail "$what: no process for rank $victim"
  sleep "0.$((RANDOM % 10))"
  kill -9 "$pid"
  ends_within "$JOB" 60 "$what"
  rc=$?
  [[ $rc -eq 137 ]] || { cat "$name.log"; fail "$what: exit $rc after kill -9 of rank $victim (want 137)"; }
  expect "$name.log" "rank $victim \(pid $pid[^)]*\) was killed by signal 9 \(SIGKILL\)" \
    "$what: the launcher naming rank $victim (pid $pid) as the first death"
  expect_not "$name.log" "$CRASH" "$what: a crash or a backtrace"
}

# resumes NAME WHAT: the newest checkpoint in NAME/ckpt verifies and a --resume trains 2 steps.
resumes() {
  local name=$1 what=$2 latest step
  [[ -f $name/ckpt/latest ]] || { cat "$name.log"; fail "$what: no checkpoint was completed"; }
  latest=$(cat "$name/ckpt/latest")
  "$CKPT_TOOL" verify "$name/ckpt" >"$name.verify" 2>&1 ||
    { cat "$name.verify"; fail "$what: the newest checkpoint $latest does not verify"; }
  step=$((10#${latest#iter_}))
  timeout 120 "$LAUNCH" --nproc-per-node "$3" "$CONFIGS/gpt-tiny.yaml" --set model.num_layers=4 \
    --set training.train_iters=$((step + 2)) --set output.dir="$SCRATCH/$name" --resume \
    --set checkpoint.save="$SCRATCH/$name/ckpt" "${@:4}" >"$name.resume.log" 2>&1 ||
    { cat "$name.resume.log"; fail "$what: --resume from $latest failed"; }
  expect "$name.resume.log" "step +$((step + 2))/$((step + 2))" "$what: the resumed run's last step"
}

tp2pp2=(--set parallel.tensor_model_parallel_size=2 --set parallel.pipeline_model_parallel_size=2)
for round in $(seq "$ROUNDS"); do
  kill_round zero3 2 "round $round, ZeRO-3 dp 2" --set zero_optimization.stage=3
  kill_round pp2 2 "round $round, pp 2" --set parallel.pipeline_model_parallel_size=2
  # A checkpoint every step: most moments of the job are inside a save.
  kill_round save 4 "round $round, tp 2 x pp 2 saving" "${tp2pp2[@]}" \
    --set checkpoint.save="$SCRATCH/save/ckpt" --set checkpoint.save_interval=1
  resumes save "round $round, tp 2 x pp 2 saving" 4 "${tp2pp2[@]}"

  # SIGTERM: the ranks finish the step, save it, and the launcher ends with 143.
  launch term 2 --set parallel.pipeline_model_parallel_size=2 \
    --set checkpoint.save="$SCRATCH/term/ckpt" --set checkpoint.save_interval=1000
  wait_for term.log "step +2/" "round $round, SIGTERM under pp 2"
  sleep "0.$((RANDOM % 10))"
  kill -TERM "$JOB"
  ends_within "$JOB" 60 "round $round, SIGTERM under pp 2"
  rc=$?
  [[ $rc -eq 143 ]] || { cat term.log; fail "round $round: SIGTERM under pp 2: exit $rc, want 143"; }
  expect term.log "stopped after step [0-9]+ of 100000 \(on SIGTERM\); checkpoint saved" \
    "round $round: SIGTERM under pp 2: the stop line"
  expect_not term.log "$CRASH" "round $round: SIGTERM under pp 2: a crash or a backtrace"
  resumes term "round $round, SIGTERM under pp 2" 2 --set parallel.pipeline_model_parallel_size=2
done
pass "$ROUNDS rounds of kill -9 under ZeRO-3 dp 2, pp 2 and a tp 2 x pp 2 save, and SIGTERM under pp 2: the first death named, no backtrace, the newest checkpoint verifies and resumes"
