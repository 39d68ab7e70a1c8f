#!/usr/bin/env bash
# Checkpoints, resuming and the output folder, through triad-launch on gpt-tiny (4 layers, global
# batch 8) over ucx. One section per ctest test:
#   resume   bit-identical losses after resuming: dp 2 ZeRO-1 killed with kill -9 mid-run then
#            --resume into the same folder (metrics appended, the killed run's extra records
#            dropped); tp 2 x pp 2 and pp 2 under zb-h1 stopped by training.exit_interval;
#            SIGTERM to the launcher, twice as `timeout` sends it (exit 143, a checkpoint of the
#            step it stopped after); keep_last.
#   reshard  a checkpoint of each of three layouts (dp 2 ZeRO-2, tp 2 x pp 2, tp 2 x dp 2
#            ZeRO-3 with the optimizer offloaded) continued in the other two: the continuation's
#            losses equal the saving layout's own to 1e-5; triad-checkpoint convert --to-hf of a
#            sharded checkpoint equals the run's own export_hf byte for byte.
#   damage   corrupt, truncated and missing rank files, another model (layers, layer-norm
#            epsilon, rotary base), a damaged metadata.json, optimizer steps edited out of range, a
#            dangling `latest`, another global batch: exit 2, one line naming the file or key,
#            nothing trained; kill -9 during a save leaves the previous checkpoint loadable.
#   finish   a run stopped by exit_interval writes no export_hf; resumed to train_iters it exports
#            (config.json's bos/eos_token_id null for a byte vocabulary); requeued with --resume
#            once complete it exits 0 saying so and writes nothing, while checkpoint.load without
#            --resume is refused; extended (train_iters raised) it says the lr schedule moved; a
#            GPT-2 tokenizer run ships vocab.json and merges.txt with <|endoftext|> as bos/eos.
#   output   a folder holding a run is refused (exit 2, before training) unless --overwrite or
#            --resume; the config given is never written over; an unwritable checkpoint.save and
#            export_hf = init_from_hf are refused up front; a full disk (a small tmpfs) during a
#            save keeps the previous checkpoint and during metrics fails naming the file.
# Usage: checkpoint_test.sh SECTION TRIAD_LAUNCH TRIAD_CHECKPOINT SOURCE_DIR WORK_DIR PYTHON
set -uo pipefail
SECTION=$1 LAUNCH=$2 CKPT=$3 SRC=$4 WORK=$5/$1 PY=$6
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
CFG="$SRC/configs/gpt-tiny.yaml"
export OMP_NUM_THREADS=1 UCX_TLS=sm,self UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
common=(--quiet --set model.num_layers=4 --set training.global_batch_size=8
        --set training.micro_batch_size=2 --set training.gradient_accumulation_steps=0
        --set lr_schedule.lr_warmup_iters=2)

fail() { echo "FAIL [$SECTION]: $*"; exit 1; }
pass() { echo "ok   [$SECTION]: $*"; }
# layout NAME: the launcher arguments of a layout.
layout() {
  case $1 in
    single) echo "--nproc-per-node 1" ;;
    dp2z1) echo "--nproc-per-node 2 --set zero_optimization.stage=1" ;;
    dp2z2) echo "--nproc-per-node 2 --set zero_optimization.stage=2" ;;
    tp2pp2) echo "--nproc-per-node 4 --set parallel.tensor_model_parallel_size=2
                  --set parallel.pipeline_model_parallel_size=2" ;;
    pp2zb) echo "--nproc-per-node 2 --set parallel.pipeline_model_parallel_size=2
                 --set pipeline=zb-h1" ;;
    tp2dp2z3) echo "--nproc-per-node 4 --set parallel.tensor_model_parallel_size=2
                    --set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu" ;;
    *) fail "no layout $1" ;;
  esac
}
# train LAYOUT LOG [--set ...]: one job; its exit code in $rc, its output in LOG.
train() {
  local lay=$1 log=$2
  shift 2
  # shellcheck disable=SC2046
  timeout 300 "$LAUNCH" "$CFG" $(layout "$lay") "${common[@]}" "$@" >"$log" 2>&1
  rc=$?
}
must_train() {
  train "$@"
  [[ $rc -eq 0 ]] || { cat "$2"; fail "training ($1, $2) exited $rc"; }
}
# same_losses A B FIRST LAST TOL: metrics A and B agree over steps FIRST..LAST (TOL 0: bit for
# bit, else relative), each step once in B.
same_losses() {
  "$PY" - "$@" <<'EOF' || fail "losses differ: $1 vs $2 (steps $3-$4)"
import json, sys
a_path, b_path, first, last, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def load(p):
    rows = [json.loads(l) for l in open(p) if l.strip()]
    steps = [r["step"] for r in rows]
    assert len(steps) == len(set(steps)), f"{p}: a step appears twice: {steps}"
    return {r["step"]: r for r in rows}
a, b = load(a_path), load(b_path)
for s in range(first, last + 1):
    assert s in a and s in b, f"step {s} missing ({a_path}: {sorted(a)}, {b_path}: {sorted(b)})"
    for k in ("loss", "grad_norm"):
        x, y = a[s][k], b[s][k]
        ok = x == y if tol == 0 else abs(x - y) <= tol * max(abs(x), 1e-12)
        assert ok, f"step {s} {k}: {x!r} vs {y!r} (tolerance {tol})"
EOF
}
one_line_error() {  # LOG PATTERN: exit 2 with one error line matching PATTERN, nothing trained
  local log=$1 pat=$2
  [[ $rc -eq 2 ]] || { cat "$log"; fail "exit $rc, not 2 ($pat)"; }
  grep -Eq "$pat" "$log" || { cat "$log"; fail "no error matching '$pat'"; }
  local n
  n=$(grep -c "error" "$log")
  [[ $n -eq 1 ]] || { cat "$log"; fail "$n error lines for '$pat', want 1"; }
  ! grep -Eq "\] step +[0-9]+/" "$log" || { cat "$log"; fail "it trained before refusing ($pat)"; }
}

# wait_lines FILE N SECONDS: until FILE has N lines (two logged steps), polling every 0.05 s for
# at most SECONDS; the caller's next check fails if they never came.
wait_lines() {
  local i
  for i in $(seq $(($3 * 20))); do
    [[ $(wc -l <"$1" 2>/dev/null || echo 0) -ge $2 ]] && return
    sleep 0.05
  done
}

section_resume() {
  # The reference: 40 steps without a stop.
  must_train dp2z1 ref.log --set training.train_iters=40 --set output.dir=ref
  # kill -9 once a checkpoint of step 8 or later exists (saves every 4), then the same command
  # with --resume. Polled often: on an idle machine a step takes ~40 ms.
  local args=(--set training.train_iters=40 --set output.dir=run --set checkpoint.save=run/ckpt
              --set checkpoint.save_interval=4 --set checkpoint.keep_last=1)
  # shellcheck disable=SC2046
  setsid "$LAUNCH" "$CFG" $(layout dp2z1) "${common[@]}" "${args[@]}" >kill.log 2>&1 &
  local job=$! i at=0
  for i in $(seq 3000); do
    at=$(sed -n 's/^iter_0*//p' run/ckpt/latest 2>/dev/null)
    [[ -n $at ]] && ((at >= 8)) && break
    sleep 0.01
  done
  kill -9 -- -"$job" 2>/dev/null
  wait "$job" 2>/dev/null
  [[ -n $at ]] && ((at >= 8)) || { cat kill.log; fail "no checkpoint of step 8 or later"; }
  at=$(sed -n 's/^iter_0*//p' run/ckpt/latest)
  ((at < 40)) || fail "the run finished before it was killed; nothing was resumed"
  # What a pruning killed halfway leaves (a renamed folder, or an iter_ folder that lost its
  # metadata.json first) goes at the next save.
  mkdir -p run/ckpt/iter_0000001 run/ckpt/iter_0000002.pruned
  touch run/ckpt/iter_0000001/rank_00000.bin run/ckpt/iter_0000002.pruned/metadata.json
  must_train dp2z1 resume.log "${args[@]}" --resume
  grep -q "done: $((40 - at)) steps" resume.log ||
    { cat resume.log; fail "the resumed run did not train from step $at to 40"; }
  same_losses ref/metrics.jsonl run/metrics.jsonl 1 40 0
  # keep_last 1: only the newest checkpoint is left (checked after the resumed run: the kill may
  # land between a save's `latest` and its pruning of the one before, which the next save
  # prunes), and no debris.
  local left
  left=$(cd run/ckpt && echo iter_*)
  [[ $left == iter_0000040 ]] || fail "keep_last 1 left $left, not iter_0000040 alone"
  pass "dp 2 ZeRO-1: kill -9 after step $at, --resume: steps $((at + 1))-40 bit-identical, metrics appended"

  # tp 2 x pp 2: stopped by exit_interval (exit 0) after step 3, resumed with checkpoint.load.
  must_train tp2pp2 ref2.log --set training.train_iters=6 --set output.dir=ref2
  must_train tp2pp2 stop2.log --set training.train_iters=6 --set output.dir=run2 \
    --set checkpoint.save=run2/ckpt --set training.exit_interval=3
  grep -q "stopped after step 3 of 6 (training.exit_interval 3)" stop2.log ||
    { cat stop2.log; fail "no exit_interval line"; }
  must_train tp2pp2 resume2.log --set training.train_iters=6 --set output.dir=run2 \
    --set checkpoint.load=run2/ckpt
  same_losses ref2/metrics.jsonl run2/metrics.jsonl 1 6 0
  pass "tp 2 x pp 2: exit_interval 3, checkpoint.load: steps 4-6 bit-identical"

  # The zero-bubble schedule (zb-h1) on pp 2, likewise.
  must_train pp2zb refzb.log --set training.train_iters=6 --set output.dir=refzb
  must_train pp2zb stopzb.log --set training.train_iters=6 --set output.dir=runzb \
    --set checkpoint.save=runzb/ckpt --set training.exit_interval=3
  must_train pp2zb resumezb.log --set training.train_iters=6 --set output.dir=runzb \
    --set checkpoint.load=runzb/ckpt
  same_losses refzb/metrics.jsonl runzb/metrics.jsonl 1 6 0
  pass "pp 2 zb-h1: exit_interval 3, checkpoint.load: steps 4-6 bit-identical"

  # SIGTERM to the launcher: the ranks finish the step, save it and end with 143. Sent twice,
  # 0.2 s apart, as `timeout` sends it (the process, then its process group): one request.
  # shellcheck disable=SC2046
  "$LAUNCH" "$CFG" $(layout dp2z2) "${common[@]}" --set training.train_iters=100000 \
    --set output.dir=run3 --set checkpoint.save=run3/ckpt >term.log 2>&1 &
  job=$!
  wait_lines run3/metrics.jsonl 2 30
  kill -TERM "$job"
  sleep 0.2
  kill -TERM "$job" 2>/dev/null
  wait "$job"
  rc=$?
  [[ $rc -eq 143 ]] || { cat term.log; fail "SIGTERM: exit $rc, want 143"; }
  local last saved
  last=$(tail -1 run3/metrics.jsonl | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["step"])')
  saved=$(cat run3/ckpt/latest)
  [[ $saved == "$(printf 'iter_%07d' "$last")" ]] ||
    { cat term.log; fail "SIGTERM after step $last saved '$saved'"; }
  grep -q "stopped after step $last of 100000 (on SIGTERM); checkpoint saved" term.log ||
    { cat term.log; fail "no stop line"; }
  "$CKPT" verify run3/ckpt >/dev/null || fail "the SIGTERM checkpoint does not verify"
  pass "SIGTERM: saved step $last, exit 143"

  # One process keeps the stop grace itself: a step longer than --stop-grace (here 400
  # micro-batches against 0.3 s) is not waited for without end; the run ends with 143 and says
  # why. Signalled as soon as a step is logged, so the next one has just begun.
  "$LAUNCH" "$CFG" --nproc-per-node 1 "${common[@]}" --stop-grace 0.3 \
    --set training.train_iters=100000 --set training.global_batch_size=0 \
    --set training.gradient_accumulation_steps=400 --set output.dir=run4 >grace.log 2>&1 &
  job=$!
  wait_lines run4/metrics.jsonl 2 60
  kill -TERM "$job"
  wait "$job"
  rc=$?
  [[ $rc -eq 143 ]] || { cat grace.log; fail "SIGTERM past the grace: exit $rc, want 143"; }
  grep -q "did not end within the stop grace (--stop-grace) of SIGTERM" grace.log ||
    { cat grace.log; fail "no grace line"; }
  pass "SIGTERM in one process: a step past --stop-grace ends the run (143)"
}

section_reshard() {
  local layouts=(dp2z2 tp2pp2 tp2dp2z3) a b
  for a in "${layouts[@]}"; do
    must_train "$a" "$a.log" --set training.train_iters=6 --set output.dir="$a" \
      --set checkpoint.save="$a/ckpt" --set checkpoint.save_interval=3
  done
  for a in "${layouts[@]}"; do
    for b in "${layouts[@]}"; do
      [[ $a == "$b" ]] && continue
      must_train "$b" "$a-to-$b.log" --set training.train_iters=6 --set output.dir="$a-to-$b" \
        --set checkpoint.load="$a/ckpt/iter_0000003"
      same_losses "$a/metrics.jsonl" "$a-to-$b/metrics.jsonl" 4 6 1e-5
    done
  done
  pass "each of ${layouts[*]} continues the others' step-3 checkpoints (steps 4-6 within 1e-5)"
  # A sharded checkpoint (tp 2 x dp 2, ZeRO-3) to the HF folder: as the run's own export.
  must_train tp2dp2z3 export.log --set training.train_iters=3 --set output.dir=exp \
    --set checkpoint.save=exp/ckpt --set output.export_hf=exp/hf
  "$CKPT" convert exp/ckpt --to-hf conv >convert.log 2>&1 || { cat convert.log; fail "convert"; }
  cmp exp/hf/model.safetensors conv/model.safetensors || fail "converted weights differ"
  cmp exp/hf/config.json conv/config.json || fail "converted config.json differs"
  # A folder that holds a model is never replaced without --overwrite.
  local before
  before=$(stat -c %Y conv/model.safetensors)
  rc=0
  "$CKPT" convert exp/ckpt --to-hf conv >again.log 2>&1 || rc=$?
  [[ $rc -eq 2 && $(wc -l <again.log) -eq 1 ]] &&
    grep -q "^triad-checkpoint: error: convert --to-hf 'conv' already holds a model (.*); add --overwrite" \
      again.log || { cat again.log; fail "convert into a model folder: exit $rc, not one refusal"; }
  [[ $(stat -c %Y conv/model.safetensors) == "$before" ]] || fail "the refused convert wrote"
  "$CKPT" convert exp/ckpt --to-hf conv --overwrite >again.log 2>&1 ||
    { cat again.log; fail "convert --overwrite"; }
  cmp exp/hf/model.safetensors conv/model.safetensors || fail "converted weights differ"
  # A checkpoint whose `latest` is a FIFO is refused by name, never opened (a read would block).
  mkdir -p fifo && mkfifo fifo/latest
  rc=0
  timeout 20 "$CKPT" info fifo >fifo.log 2>&1 || rc=$?
  [[ $rc -eq 2 ]] && grep -q "is a FIFO (named pipe), not a regular file" fifo.log ||
    { cat fifo.log; fail "a FIFO as latest: exit $rc"; }
  "$CKPT" info tp2pp2/ckpt >info.log 2>&1 || { cat info.log; fail "info"; }
  grep -q "^layout: tp 2 x pp 2 x dp 1 (world 4), ZeRO stage 0" info.log || { cat info.log; fail "info layout"; }
  grep -q "^checksums: all files intact" info.log || { cat info.log; fail "info checksums"; }
  pass "triad-checkpoint convert --to-hf equals export_hf byte for byte; info"
}

section_damage() {
  must_train dp2z1 save.log --set training.train_iters=4 --set output.dir=good \
    --set checkpoint.save=good/ckpt --set checkpoint.save_interval=2
  local it=good/ckpt/iter_0000004 f
  f=$it/rank_00001.safetensors
  # load CASE PATTERN: a copy of the checkpoint, damaged by the caller, is refused.
  cp -r good/ckpt bad
  # One byte of the data, past the header (8 bytes of length, then that many of JSON).
  local data_at
  data_at=$(($(od -An -t u8 -N 8 "$f" | tr -d ' ') + 8 + 100))
  printf 'X' | dd of=bad/iter_0000004/rank_00001.safetensors bs=1 seek="$data_at" conv=notrunc \
    2>/dev/null
  train dp2z1 corrupt.log --set training.train_iters=8 --set output.dir=o1 --set checkpoint.load=bad
  one_line_error corrupt.log "rank_00001.safetensors' is corrupt: its CRC-32"
  rm -rf bad && cp -r good/ckpt bad
  truncate -s 1000 bad/iter_0000004/rank_00000.safetensors
  train dp2z1 trunc.log --set training.train_iters=8 --set output.dir=o2 --set checkpoint.load=bad
  one_line_error trunc.log "rank_00000.safetensors' is 1000 bytes but was saved with"
  rm -rf bad && cp -r good/ckpt bad
  rm bad/iter_0000004/rank_00001.safetensors
  train dp2z1 missing.log --set training.train_iters=8 --set output.dir=o3 --set checkpoint.load=bad
  one_line_error missing.log "rank_00001.safetensors' \(rank 1's state\) is missing"
  train dp2z1 model.log --set training.train_iters=8 --set output.dir=o4 \
    --set checkpoint.load=good/ckpt --set model.num_layers=2
  one_line_error model.log "holds another model: model.num_layers is 4 there but 2"
  rm -rf bad && cp -r good/ckpt bad
  head -c 100 good/ckpt/iter_0000004/metadata.json >bad/iter_0000004/metadata.json
  train dp2z1 meta.log --set training.train_iters=8 --set output.dir=o5 --set checkpoint.load=bad
  one_line_error meta.log "metadata.json' is damaged or incomplete"
  rm -rf bad && cp -r good/ckpt bad
  echo iter_0000099 >bad/latest
  train dp2z1 latest.log --set training.train_iters=8 --set output.dir=o6 --set checkpoint.load=bad
  one_line_error latest.log 'latest. names "iter_0000099", which has no metadata.json'
  # A `latest` with terminal escape bytes is shown escaped, never sent raw.
  printf 'iter_\033[2J\n' >bad/latest
  train dp2z1 latest-esc.log --set training.train_iters=8 --set output.dir=o6 --set checkpoint.load=bad
  one_line_error latest-esc.log 'latest. names "iter_\\u001b\[2J", which has no metadata.json'
  ! grep -q $'\033' latest-esc.log || { cat -v latest-esc.log; fail "the escape byte reached the log"; }
  train dp2z1 eps.log --set training.train_iters=8 --set output.dir=o4 \
    --set checkpoint.load=good/ckpt --set model.layernorm_epsilon=0.001
  one_line_error eps.log "model.layernorm_epsilon is 1e-05 there but 0.001 in this config; .*--set model.layernorm_epsilon=1e-05"
  train dp2z1 batch.log --set training.train_iters=8 --set output.dir=o7 \
    --set checkpoint.load=good/ckpt --set training.global_batch_size=4
  one_line_error batch.log "saved with global_batch_size 8 but this run has 4"
  # A step edited out of range (1e15 wraps in an int): refused by name, not a data-loader crash.
  rm -rf bad && cp -r good/ckpt bad
  sed -i 's/"step": *4,/"step": 1000000000000000,/' bad/iter_0000004/metadata.json
  grep -q '"step": 1000000000000000' bad/iter_0000004/metadata.json || fail "the step edit missed"
  train dp2z1 step.log --set training.train_iters=8 --set output.dir=o8 --set checkpoint.load=bad
  one_line_error step.log "metadata.json has step 1000000000000000, outside 0..4"
  # Optimizer steps past the step (they drive the lr and AdamW's bias correction): refused by name.
  rm -rf bad && cp -r good/ckpt bad
  sed -i 's/"steps": *4\b/"steps": 1000/' bad/iter_0000004/metadata.json
  grep -q '"steps": 1000' bad/iter_0000004/metadata.json || fail "the optimizer steps edit missed"
  train dp2z1 opt.log --set training.train_iters=8 --set output.dir=o8 --set checkpoint.load=bad
  one_line_error opt.log "iter_0000004' metadata.json has optimizer.steps 1000, outside 0..4 \\(at most the checkpoint's step\\)"
  # --resume into a folder whose `latest` is gone: refused naming the newest step, not a fresh
  # start that throws the saved steps away unsaid.
  rm -rf bad && cp -r good/ckpt bad && rm bad/latest
  train dp2z1 nolatest.log --set training.train_iters=8 --set output.dir=o9 \
    --set checkpoint.load=bad --resume
  one_line_error nolatest.log "holds iter_0000004.* but no .latest.; set checkpoint.load="
  # Rotary positions: another rope_base is another model (with learned ones it is unused).
  must_train single rope.log --set training.train_iters=1 --set model.num_layers=1 \
    --set model.position_embedding=rope --set output.dir=rope --set checkpoint.save=rope/ckpt
  train single ropebase.log --set training.train_iters=2 --set model.num_layers=1 \
    --set model.position_embedding=rope --set model.rope_base=500 --set output.dir=o10 \
    --set checkpoint.load=rope/ckpt
  one_line_error ropebase.log "holds another model: model.rope_base is 10000.0 there but 500.0"
  for d in o1 o2 o3 o4 o5 o6 o7 o8 o9 o10; do [[ ! -e $d/metrics.jsonl ]] || fail "$d has metrics"; done
  pass "corrupt, truncated, missing, other model (layers, epsilon, rope_base), damaged metadata, dangling latest, other batch, step and optimizer steps out of range, --resume without latest"

  # kill -9 while a save is being written: the previous checkpoint stays loadable.
  local hits=0 try
  for try in 1 2 3 4 5 6; do
    rm -rf k
    # shellcheck disable=SC2046
    setsid "$LAUNCH" "$CFG" $(layout dp2z1) "${common[@]}" --set training.train_iters=100000 \
      --set output.dir=k --set checkpoint.save=k/ckpt --set checkpoint.save_interval=1 >k.log 2>&1 &
    local job=$! i
    for i in $(seq 2000); do
      [[ -f k/ckpt/latest ]] && compgen -G "k/ckpt/iter_*.tmp/rank_*" >/dev/null && break
      sleep 0.002
    done
    kill -9 -- -"$job" 2>/dev/null
    wait "$job" 2>/dev/null
    compgen -G "k/ckpt/iter_*.tmp" >/dev/null && hits=$((hits + 1))
    "$CKPT" verify k/ckpt >verify.log 2>&1 || { cat verify.log; fail "after kill -9 in a save: $(cat k/ckpt/latest) does not verify"; }
  done
  ((hits > 0)) || fail "no kill landed during a save in 6 tries"
  local step
  step=$(sed 's/iter_0*//' k/ckpt/latest)
  must_train dp2z1 after-kill.log --set output.dir=k2 --set checkpoint.load=k/ckpt \
    --set training.train_iters=$((step + 1))
  [[ $(wc -l <k2/metrics.jsonl) -eq 1 ]] || fail "the run resumed after the kill trained $(wc -l <k2/metrics.jsonl) steps, want 1"
  pass "kill -9 during a save ($hits of 6 landed mid-save): the latest checkpoint verifies and loads"
}

# The names, sizes and checksums of everything under a folder.
tree_sum() { (cd "$1" && find . -printf '%p %y %s\n' | sort && find . -type f -print0 | sort -z | xargs -0 -r md5sum); }

section_finish() {
  local args=(--set training.train_iters=4 --set output.dir=fin --set checkpoint.save=fin/ckpt
              --set output.export_hf=fin/hf)
  # Stopped by exit_interval: a checkpoint, no export (it is written once train_iters is reached).
  must_train single stop.log "${args[@]}" --set training.exit_interval=2
  [[ -f fin/ckpt/iter_0000002/metadata.json && ! -e fin/hf ]] ||
    { ls -R fin; fail "exit_interval 2: want a checkpoint of step 2 and no export_hf"; }
  must_train single rest.log "${args[@]}" --resume
  "$PY" - fin/hf/config.json <<'EOF' || fail "export_hf's config.json: bos/eos_token_id"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["vocab_size"] == 256 and c["bos_token_id"] is None and c["eos_token_id"] is None, c
EOF
  # Requeued once complete: exit 0, one line saying so, nothing written.
  local before
  before=$(tree_sum fin)
  train single again.log "${args[@]}" --resume
  [[ $rc -eq 0 ]] || { cat again.log; fail "--resume of a complete run: exit $rc, want 0"; }
  grep -q "the run is complete: checkpoint 'fin/ckpt/iter_0000004' is at step 4, training.train_iters is 4" \
    again.log || { cat again.log; fail "no line saying the run is complete"; }
  ! grep -Eqi "error|\] step +[0-9]+/" again.log || { cat again.log; fail "the complete run trained or erred"; }
  [[ $(tree_sum fin) == "$before" ]] || fail "the complete run's --resume wrote into fin"
  # checkpoint.load without --resume asks to train from it: nothing is left, refused.
  train single load.log --set training.train_iters=4 --set output.dir=fin2 --set checkpoint.load=fin/ckpt
  one_line_error load.log "is at step 4, not before training.train_iters 4: nothing is left to train"
  # Extended: the decay now ends at step 6, not 4; said once, and the run goes on.
  must_train single more.log --set training.train_iters=6 --set output.dir=fin \
    --set checkpoint.save=fin/ckpt --resume
  [[ $(grep -c "learning-rate schedule differs" more.log) -eq 1 ]] &&
    grep -q "(decay_steps 4 -> 6 (training.train_iters)): optimizer step 5 gets lr" more.log &&
    grep -q "done: 2 steps" more.log || { cat more.log; fail "no schedule line, or not 2 steps"; }
  pass "exit_interval: no export; resumed to the end: exported (bos/eos null); requeued when complete: exit 0, nothing written; extended: the schedule change said"

  # A GPT-2 tokenizer run ships its vocabulary (a byte-level one here: 256 bytes + <|endoftext|>).
  "$PY" - <<'EOF' || fail "writing the test vocabulary"
import json
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
enc = {chr(c): b for b, c in zip(bs, cs)}
enc["<|endoftext|>"] = 256
json.dump(enc, open("encoder.json", "w"))
open("vocab.bpe", "w").write("#version: 0.2\n")
EOF
  must_train single bpe.log --set training.train_iters=1 --set model.num_layers=1 \
    --set model.hidden_size=32 --set model.num_attention_heads=2 --set model.vocab_size=50257 \
    --set data.tokenizer=gpt2 --set data.vocab_file=encoder.json --set data.merge_file=vocab.bpe \
    --set output.dir=bpe --set output.export_hf=bpe/hf
  cmp encoder.json bpe/hf/vocab.json && cmp vocab.bpe bpe/hf/merges.txt ||
    fail "export_hf did not ship the tokenizer's files as vocab.json and merges.txt"
  "$PY" -c 'import json, sys; c = json.load(open(sys.argv[1])); assert c["bos_token_id"] == c["eos_token_id"] == 256, c' \
    bpe/hf/config.json || fail "bos/eos_token_id are not <|endoftext|>'s id"
  pass "a GPT-2 tokenizer run's export holds vocab.json, merges.txt and <|endoftext|> as bos/eos"
}

# tmpfs SIZE DIR CMD...: CMD with a SIZE tmpfs mounted at DIR (a private mount namespace: root,
# or an unprivileged user namespace).
with_tmpfs() {
  local size=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  unshare -rm --propagation private sh -c 'mount -t tmpfs -o size="$0" none "$1" && shift && exec "$@"' \
    "$size" "$dir" "$@"
}

section_output() {
  must_train single first.log --set training.train_iters=2 --set output.dir=out
  train single again.log --set training.train_iters=2 --set output.dir=out
  one_line_error again.log "output.dir 'out' already holds a run \(metrics.jsonl\); pass --overwrite"
  must_train single over.log --set training.train_iters=3 --set output.dir=out --overwrite
  [[ $(wc -l <out/metrics.jsonl) -eq 3 ]] || fail "--overwrite did not start the metrics anew"
  mkdir -p own && cp "$CFG" own/config.yaml
  rc=0
  timeout 60 "$LAUNCH" own/config.yaml "${common[@]}" --set training.train_iters=1 \
    --set output.dir=own --overwrite >own.log 2>&1 || rc=$?
  one_line_error own.log "holds the config file this run was given"
  cmp -s "$CFG" own/config.yaml || fail "the given config was written over"
  train single ro.log --set training.train_iters=1 --set output.dir=o2 --set checkpoint.save=/proc/ckpt
  one_line_error ro.log "checkpoint.save '/proc/ckpt' cannot be created"
  must_train single hf.log --set training.train_iters=1 --set output.dir=o3 --set output.export_hf=hf
  train single hf2.log --set training.train_iters=1 --set output.dir=o4 --set output.export_hf=hf \
    --set output.init_from_hf=hf
  one_line_error hf2.log "output.export_hf 'hf' is the folder the run starts from"
  # An exported model is replaced only with --overwrite.
  train single hf3.log --set training.train_iters=1 --set output.dir=o6 --set output.export_hf=hf
  one_line_error hf3.log "output.export_hf 'hf' already holds a model \\(model.safetensors\\); pass --overwrite"
  [[ ! -e o6 ]] || fail "the refused run created its output.dir"
  must_train single hf4.log --set training.train_iters=1 --set output.dir=o6 --set output.export_hf=hf \
    --overwrite
  pass "a run's folder, the config given, checkpoint.save and export_hf are checked before training"

  if ! unshare -rm true 2>/dev/null; then
    echo "SKIP [$SECTION]: no mount namespace for a small tmpfs (unshare -rm)"
    exit 77
  fi
  # A checkpoint of gpt-tiny is ~10 MB: the first fits a 16 MB disk, the second does not. The
  # disk lives as long as its namespace: the checkpoint left is verified inside it.
  with_tmpfs 16m disk bash -c '"$0" "$@" >full.log 2>&1; echo "rc=$?"; "'"$CKPT"'" verify disk/ckpt \
    >verify.log 2>&1; echo "verify=$?"; echo "latest=$(cat disk/ckpt/latest)"' "$LAUNCH" "$CFG" \
    "${common[@]}" --set training.train_iters=4 --set output.dir=o5 --set checkpoint.save=disk/ckpt \
    --set checkpoint.save_interval=2 >full.status 2>&1
  grep -q "^rc=2$" full.status || { cat full.status full.log; fail "a full disk during a save: want exit 2"; }
  grep -q "checkpoint.save: saving step 4 .* No space left on device.*the previous checkpoint stays the latest" full.log ||
    { cat full.log; fail "no full-disk message for the save"; }
  grep -q "^verify=0$" full.status && grep -q "^latest=iter_0000002$" full.status ||
    { cat full.status verify.log; fail "the previous checkpoint is not the intact latest"; }
  # The first save fails (a 4 MB disk): no previous checkpoint is promised.
  with_tmpfs 4m disk bash -c '"$0" "$@" >first.log 2>&1; echo "rc=$?"' "$LAUNCH" "$CFG" \
    "${common[@]}" --set training.train_iters=2 --set output.dir=o5b --set checkpoint.save=disk/ckpt \
    --set checkpoint.save_interval=2 >first.status 2>&1
  grep -q "^rc=2$" first.status &&
    grep -q "saving step 2 .* No space left on device.*no checkpoint was saved before it" first.log &&
    ! grep -q "stays the latest" first.log || { cat first.status first.log; fail "a failed first save"; }
  # The metrics file on a disk that fills: an error naming it, no "done".
  rc=0
  with_tmpfs 8k small timeout 120 "$LAUNCH" "$CFG" "${common[@]}" --set training.train_iters=200 \
    --set output.dir=small/run >small.log 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || { cat small.log; fail "a full disk during metrics: exit $rc, want 2"; }
  grep -q "writing 'small/run/metrics.jsonl' failed: No space left on device" small.log ||
    { cat small.log; fail "no full-disk message naming metrics.jsonl"; }
  ! grep -q "done:" small.log || fail "'done' after a failed metrics write"
  pass "a full disk: during a save (previous checkpoint kept), during metrics (named, exit 2)"
}

"section_$SECTION"
