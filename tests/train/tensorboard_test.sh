#!/usr/bin/env bash
# TensorBoard event files (logging.tensorboard_dir, triad-launch --tensorboard-dir) of
# configs/gpt-tiny.yaml runs, read by tensorboard_check.py (its own CRC-32C and protobuf types).
# One section per ctest test:
#   events   one rank, dp 2 (rank 0 alone writes) with tensorboard_log_interval 3, fp16's loss
#            scaler with a step skipped on overflow; validation every 3 steps (a last step 6
#            that evaluates twice, as Megatron does at the end of training), log_interval 2:
#            every record's CRCs verify, every scalar equals metrics.jsonl's value of its step
#            (float32), under Megatron-LM's tags and under Megatron-DeepSpeed's grouped ones;
#            no event file without the key.
#   resume   a run stopped by training.exit_interval, then resumed from its checkpoint: a second
#            event file beside the first, which is left byte for byte as it was; both together
#            equal metrics.jsonl, each step once. A run killed with kill -9 after a few steps:
#            every record it wrote verifies and equals metrics.jsonl.
#   refusal  a tensorboard_dir that is a file or lies under one, tensorboard_log_interval 0,
#            --tensorboard-dir without a value: exit 2, one line naming the key and the value,
#            nothing written.
# Usage: tensorboard_test.sh SECTION TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -uo pipefail
SECTION=$1 LAUNCH=$2 SRC=$3 WORK=$4/$1 PY=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
CFG="$SRC/configs/gpt-tiny.yaml"
CHECK="$SRC/tests/train/tensorboard_check.py"
export OMP_NUM_THREADS=1 UCX_TLS=sm,self UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
# shellcheck disable=SC2054  # data.split's commas are its value
common=(--quiet --set model.num_layers=2 --set training.global_batch_size=8
        --set training.micro_batch_size=2 --set training.gradient_accumulation_steps=0
        --set lr_schedule.lr_warmup_iters=2 --set data.split=90,10,0
        --set training.eval_interval=3 --set training.eval_iters=1 --set training.log_interval=2)

fail() { echo "FAIL [$SECTION]: $*"; exit 1; }
pass() { echo "ok   [$SECTION]: $*"; }
# train RANKS LOG [ARGS...]: one job; its exit code in $rc, its output in LOG.
train() {
  local n=$1 log=$2
  shift 2
  timeout 300 "$LAUNCH" "$CFG" --nproc-per-node "$n" "${common[@]}" "$@" >"$log" 2>&1
  rc=$?
}
must_train() {
  train "$@"
  [[ $rc -eq 0 ]] || { cat "$2"; fail "training ($2) exited $rc"; }
}
event_files() { find "$1" -name 'events.out.tfevents.*'; }
# check [--killed] DIR TB_INTERVAL [FILES]: the event files of run DIR (in DIR/tb) against
# DIR/metrics.jsonl (see tensorboard_check.py).
check() {
  local killed=() grouped=()
  [[ $1 == --killed ]] && killed=(--killed) && shift
  [[ $1 == --grouped ]] && grouped=(--grouped "$2" "$3") && shift 3
  "$PY" "$CHECK" "${killed[@]}" "${grouped[@]}" "$1/tb" "$1/metrics.jsonl" 8 "$2" 2 ${3:+"$3"}
  case $? in
    0) ;;
    77) exit 77 ;;  # no python3-protobuf
    *) fail "the event files of $1 differ from its metrics.jsonl" ;;
  esac
}

section_events() {
  must_train 1 one.log --set training.train_iters=7 --set output.dir=one \
    --set logging.tensorboard_dir=one/tb
  check one 1 1
  # A last step that evaluates (6, every 3): Megatron's second evaluation at the end of training,
  # the same tags once more at step 6.
  must_train 1 end.log --set training.train_iters=6 --set output.dir=end \
    --set logging.tensorboard_dir=end/tb
  grep -q '"valid_loss_end"' end/metrics.jsonl || fail "no end-of-training evaluation at step 6"
  check end 1 1
  # None when --exit-interval divides the last step: Megatron exits before it.
  must_train 1 endexit.log --set training.train_iters=6 --set training.exit_interval=6 \
    --set output.dir=endexit --set logging.tensorboard_dir=endexit/tb
  grep -q '"valid_loss"' endexit/metrics.jsonl || fail "no evaluation at step 6 under exit_interval 6"
  if grep -q '"valid_loss_end"' endexit/metrics.jsonl; then
    fail "an end-of-training evaluation although exit_interval 6 ends the run at step 6"
  fi
  check endexit 1 1
  # The flag, another interval, and two ranks: rank 0 writes the one file.
  must_train 2 dp2.log --set training.train_iters=7 --set output.dir=dp2 \
    --set logging.tensorboard_log_interval=3 --tensorboard-dir dp2/tb
  check dp2 3 1
  # fp16's loss scaler (over fp32 math on the CPU), an overflow forced at step 3: loss-scale.
  TRIAD_INJECT_OVERFLOW=3@0 must_train 1 fp16.log --set training.train_iters=5 \
    --set output.dir=fp16 --set precision=fp32 --set fp16.enabled=true \
    --set logging.tensorboard_dir=fp16/tb
  grep -q '"skipped":true' fp16/metrics.jsonl || fail "no skipped step in the fp16 run"
  check fp16 1 1
  # Megatron-DeepSpeed's grouped tags, with "vs tokens" (gpt-tiny: 64 tokens per sample), under
  # fp16 (its loss-scale) and without (none) at dp 2.
  TRIAD_INJECT_OVERFLOW=3@0 must_train 1 mds.log --set training.train_iters=5 \
    --set output.dir=mds --set precision=fp32 --set fp16.enabled=true \
    --set logging.tensorboard_dir=mds/tb --set logging.tensorboard_tags=megatron-deepspeed
  check --grouped 64 1 mds 1 1
  must_train 2 mds2.log --set training.train_iters=4 --set output.dir=mds2 \
    --set logging.tensorboard_dir=mds2/tb --set logging.tensorboard_tags=megatron-deepspeed
  check --grouped 64 2 mds2 1 1
  # Without the key, no event file anywhere.
  must_train 1 off.log --set training.train_iters=2 --set output.dir=off
  [[ -z $(event_files off) ]] ||
    fail "a run without logging.tensorboard_dir wrote an event file"
  pass "1 rank, dp 2 (tensorboard_log_interval 3), fp16 with a skipped step: every CRC verifies, every scalar equals metrics.jsonl"
}

section_resume() {
  local args=(--set training.train_iters=8 --set output.dir=run --set checkpoint.save=run/ckpt
              --set logging.tensorboard_dir=run/tb)
  must_train 1 first.log "${args[@]}" --set training.exit_interval=4
  grep -q "stopped after step 4 of 8" first.log || { cat first.log; fail "no stop after step 4"; }
  local first sum
  [[ $(event_files run/tb | wc -l) -eq 1 ]] || fail "the first run wrote $(event_files run/tb | wc -l) event files"
  first=$(event_files run/tb)
  sum=$(sha256sum "$first")
  check run 1 1
  must_train 1 resumed.log "${args[@]}" --resume
  [[ $(sha256sum "$first") == "$sum" ]] || fail "the resumed run changed $first"
  [[ $(event_files run/tb | wc -l) -eq 2 ]] || { ls -l run/tb; fail "want two event files after resuming"; }
  check run 1 2
  # kill -9 mid-run: every record logged stays whole and verifies, and equals metrics.jsonl up
  # to the last step both hold.
  setsid "$LAUNCH" "$CFG" --nproc-per-node 1 "${common[@]}" --set training.train_iters=100000 \
    --set output.dir=killed --set logging.tensorboard_dir=killed/tb >killed.log 2>&1 &
  local job=$!
  for _ in $(seq 3000); do
    [[ $(wc -l <killed/metrics.jsonl 2>/dev/null || echo 0) -ge 5 ]] && break
    sleep 0.01
  done
  kill -9 -- -"$job" 2>/dev/null
  wait "$job" 2>/dev/null
  check --killed killed 1 1
  pass "resumed after step 4: a second event file, the first unchanged, both equal metrics.jsonl; a run killed with kill -9: what it logged reads back"
}

# refused LOG PATTERN: exit 2 with one error line matching PATTERN, nothing trained or written.
refused() {
  local log=$1 pat=$2
  [[ $rc -eq 2 ]] || { cat "$log"; fail "exit $rc, not 2 ($pat)"; }
  [[ $(wc -l <"$log") -eq 1 ]] || { cat "$log"; fail "not one line ($pat)"; }
  grep -Eq "$pat" "$log" || { cat "$log"; fail "no error matching '$pat'"; }
  [[ ! -e out ]] || fail "output.dir was written before the refusal ($pat)"
  [[ -z $(event_files .) ]] || fail "an event file was written ($pat)"
}

section_refusal() {
  echo x >a-file
  train 1 file.log --set output.dir=out --set logging.tensorboard_dir=a-file
  refused file.log "error: logging.tensorboard_dir 'a-file' is a regular file, not a folder; choose"
  train 1 under.log --set output.dir=out --set logging.tensorboard_dir=a-file/tb
  refused under.log "error: logging.tensorboard_dir 'a-file/tb' cannot be created: .*a-file' is a regular file"
  train 1 interval.log --set output.dir=out --set logging.tensorboard_dir=tb \
    --set logging.tensorboard_log_interval=0
  refused interval.log "error: .*logging.tensorboard_log_interval.*0"
  train 1 flag.log --set output.dir=out --tensorboard-dir
  refused flag.log "error: --tensorboard-dir needs a value"
  pass "a file, a folder under a file, interval 0, a flag without its value: exit 2, one line, nothing written"
}

"section_$SECTION"
