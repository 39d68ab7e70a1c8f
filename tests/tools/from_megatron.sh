#!/usr/bin/env bash
# triad-config from-megatron on the argument lists of Megatron(-DeepSpeed) GPT pretraining scripts
# (tests/tools/megatron/*.args: GPT-2 125M, GPT-3 1.3B with a data blend and TensorBoard, a
# 13B-style tp 4 x pp 4 interleaved layout, a 350M --deepspeed ZeRO-2 job with its ds_config.json):
# the YAML loads, every key line names its argument, and triad-launch --dry-run of it has the
# layout and batch sizes the arguments say; triad-launch --megatron-args gives the same dry run;
# --strict refuses what is not carried over; bad arguments are one line, exit 2.
# Usage: from_megatron.sh BIN_DIR CASES_DIR WORK_DIR
set -u
BIN=$(cd "$1" && pwd) CASES=$(cd "$2" && pwd) WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
cd "$CASES" || exit 1  # the .args name ds_zero2.json relative to here, as a script's folder would
fails=0 passes=0
pass() { echo "PASS $1"; passes=$((passes + 1)); }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
report() { grep -v '^#\|^runs here\|^no effect' "$1"; }

# check NAME WORLD LAYOUT MICRO ACCUMULATION GLOBAL
check() {
  local name=$1 world=$2 layout=$3 micro=$4 accum=$5 global=$6 y=$WORK/$1.yaml
  # shellcheck disable=SC2046  # one argument per word of the fixture
  if ! "$BIN/triad-config" from-megatron -- $(cat "$name.args") >"$y" 2>"$WORK/err.txt"; then
    fail "$name: from-megatron: $(cat "$WORK/err.txt")"; return
  fi
  local bare
  bare=$(grep -v '^ *#' "$y" | grep -v '^[a-z0-9_]*:$' | grep -vc ' # ')
  if [[ $bare -ne 0 ]]; then fail "$name: $bare key lines without the argument they came from"; fi
  if ! "$BIN/triad-launch" "$y" --dry-run --nproc-per-node "$world" >"$WORK/a.txt" 2>&1; then
    fail "$name: the YAML does not load: $(cat "$WORK/a.txt")"; return
  fi
  local want="layout:              world $world = $layout"
  if ! grep -qxF "$want" "$WORK/a.txt"; then
    fail "$name: layout: $(grep '^layout' "$WORK/a.txt")"; return
  fi
  for kv in "micro_batch_size: $micro" "gradient_accumulation_steps: $accum" \
    "global_batch_size: $global"; do
    grep -qx "  $kv" "$WORK/a.txt" || { fail "$name: $kv: $(grep batch "$WORK/a.txt")"; return; }
  done
  pass "$name: $layout, micro $micro x accumulation $accum = global $global"
  "$BIN/triad-launch" --megatron-args "$(cat "$name.args")" --dry-run --nproc-per-node "$world" \
    >"$WORK/b.txt" 2>&1
  if diff <(report "$WORK/a.txt") <(report "$WORK/b.txt") >/dev/null; then
    pass "$name: --megatron-args gives the same dry run"
  else
    fail "$name: --megatron-args differs:"
    diff <(report "$WORK/a.txt") <(report "$WORK/b.txt") | head -5
  fi
}
check gpt_125m 1 "tp 1 x pp 1 x dp 1" 4 2 8
check gpt_1_3b 8 "tp 1 x pp 1 x dp 8" 2 32 512
check gpt_13b_3d 32 "tp 4 x pp 4 x dp 2, sequence parallel" 1 512 1024
check gpt_350m_zero2 8 "tp 1 x pp 1 x dp 8" 4 8 256

# What each script asked for beyond the layout, in the YAML.
has() {
  if grep -qE "$2" "$WORK/$1.yaml"; then pass "$1: /$2/"; else fail "$1: lacks /$2/"; fi
}
has gpt_125m '^  lr_warmup_fraction: 0.01 +# --lr-warmup-fraction .01$'
has gpt_125m "^  lr_lag_steps: 1 +# Megatron steps its scheduler after each update$"
has gpt_125m "^  raise_error_at_min_scale: false +# Megatron's scaler"
has gpt_125m '^#   no --hidden-dropout .Megatron.s default 0.1.: Triad trains without dropout'
has gpt_125m '^  enabled: true +# --fp16$'
has gpt_125m '^  path: data/meg-gpt2_text_document +# --data-path'
has gpt_1_3b '^attention: flash2 +# --use-flash-attn-v2$'
has gpt_1_3b '^  path: \[0.3, data/arxiv_text_document, 0.7, data/pile_text_document\]'
# Both counts given: Megatron's --train-samples // 512 (286102) ends the run before the step that
# reaches --train-tokens (286103).
has gpt_1_3b '^  train_iters: 286102 +# --train-samples 146484375 / 512 per step'
# ... and its training data is built for the samples themselves, as Megatron's is.
has gpt_1_3b '^  train_samples: 146484375 +# --train-samples 146484375 .the samples Megatron builds'
# The schedule's phases stay in samples, as Megatron counts them (tokens / seq_length).
has gpt_1_3b '^  lr_decay_samples: 146484375.0 +# --lr-decay-tokens 300000000000 / 2048 tokens'
has gpt_1_3b '^  lr_warmup_samples: 183105.46875 +# --lr-warmup-tokens 375000000 / 2048 tokens'
has gpt_1_3b '^  tensorboard_dir: tensorboard/gpt_1.3B +# --tensorboard-dir tensorboard/gpt_1.3B$'
has gpt_1_3b '^#   --log-timers-to-tensorboard: no effect in Triad '
has gpt_13b_3d \
  '^  virtual_pipeline_model_parallel_size: 2 +# --num-layers-per-virtual-pipeline-stage 5$'
has gpt_13b_3d '^  recompute_granularity: selective +# --recompute-granularity selective$'
has gpt_13b_3d '^  stage: 1 +# --use-distributed-optimizer'
has gpt_13b_3d '^  position_embedding: rope +# --position-embedding-type rope$'
has gpt_13b_3d \
  '^  overlap_tensor_comm: false +# --no-async-tensor-model-parallel-allreduce$'
has gpt_13b_3d '^  tp_comm_overlap: true +# --tp-comm-overlap$'
has gpt_350m_zero2 '^  stage: 2 +# --zero-stage 2$'
has gpt_350m_zero2 \
  '^  reduce_bucket_size: 500000000 +# ds_zero2.json: zero_optimization.reduce_bucket_size$'
has gpt_350m_zero2 '^#   ds_zero2.json: zero_optimization.contiguous_gradients: no effect in Triad'
has gpt_350m_zero2 '^#   --deepspeed: no effect in Triad'
# Under --deepspeed, Megatron-DeepSpeed hands DeepSpeed Megatron's optimizer: the JSON clips.
has gpt_350m_zero2 '^  clip_grad: 1 +# ds_zero2.json: gradient_clipping$'
has gpt_350m_zero2 '^#   --clip-grad 1.0: no effect under --deepspeed'
# Megatron's GPTDataset always shuffles; the builder (its --split rounding and blend sizes) is
# Megatron-LM's unless --deepspeed says Megatron-DeepSpeed.
has gpt_125m '^  shuffle: true +# .no argument: Megatron.s GPTDataset always shuffles.$'
has gpt_125m '^  builder: megatron-lm +# .no --deepspeed: Megatron-LM.s --split rounding'
has gpt_1_3b '^  shuffle: true +# '
has gpt_350m_zero2 '^  builder: megatron-deepspeed +# --deepspeed .Megatron-DeepSpeed.s --split'

# refused WANT ARGS...: exit 2, one stderr line "triad-config: error: ..." holding WANT, no stdout.
refused() {
  local want=$1
  shift
  "$BIN/triad-config" "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"
  local rc=$?
  if [[ $rc -eq 2 && $(grep -c . "$WORK/err.txt") -eq 1 && ! -s "$WORK/out.txt" ]] &&
    grep -q "^triad-config: error: .*$want" "$WORK/err.txt"; then
    pass "refused $*: $(cat "$WORK/err.txt")"
  else
    fail "$*: exit $rc: $(cat "$WORK/err.txt" "$WORK/out.txt" | head -3)"
  fi
}
# shellcheck disable=SC2046
refused 'not carried over (--strict): --rampup-batch-size 32 32 2000000: ' \
  from-megatron --strict -- $(cat gpt_1_3b.args) --rampup-batch-size 32 32 2000000
refused '--num-layers takes one value' from-megatron -- --num-layers
refused "model.num_layers: 'x' is not an integer (--num-layers x)" from-megatron -- --num-layers x
refused "'abc' is not a number" from-megatron -- --lr-warmup-fraction abc
refused 'micro_batch_size is 8 (--micro-batch-size 8) but 4 (ds_zero2.json: train_micro' \
  from-megatron -- --micro-batch-size 8 --deepspeed --deepspeed_config ds_zero2.json
refused 'zero_optimization.stage is 3 (--zero-stage 3) but 2 (ds_zero2.json' \
  from-megatron -- --zero-stage 3 --deepspeed --deepspeed_config ds_zero2.json
refused 'needs Megatron.s arguments after --' from-megatron
# What Megatron itself refuses, and a schedule Triad lacks (never replaced by another).
M=(--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 32 --micro-batch-size 2
   --global-batch-size 4)
refused 'neither --train-iters nor --train-samples' from-megatron -- "${M[@]}" --lr 1e-3
refused 'give no --lr' from-megatron -- "${M[@]}" --train-iters 10
refused '--train-iters and --train-samples are both given' from-megatron -- "${M[@]}" --lr 1e-3 \
  --train-iters 10 --train-samples 40
refused '--lr-warmup-iters and --lr-warmup-fraction are both given' from-megatron -- "${M[@]}" \
  --lr 1e-3 --train-iters 10 --lr-warmup-iters 2 --lr-warmup-fraction 0.1
refused "data.split '1,x,2' has 'x'" from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 \
  --split 1,x,2
refused "are both true; keep one" from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 --fp16 --bf16
refused "lr_decay_style is one of" from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 \
  --lr-decay-style WSD
refused '--train-iters and --lr-decay-samples mix iteration- and sample-based counts' \
  from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 --lr-decay-samples 40
# Megatron-LM asserts a single data source.
for other in --train-data-path --valid-data-path --test-data-path; do
  refused "\-\-data-path and $other are both given; Megatron takes a single data source" \
    from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 --data-path d/a $other d/b
done
refused '--train-samples and --lr-warmup-iters mix' from-megatron -- "${M[@]}" --lr 1e-3 \
  --train-samples 40 --lr-warmup-iters 2
refused '--train-samples 40 needs --global-batch-size' from-megatron -- --num-layers 2 \
  --hidden-size 64 --num-attention-heads 2 --seq-length 32 --micro-batch-size 2 --lr 1e-3 \
  --train-samples 40
refused '--train-samples 1e30 gives .* steps of 4; it must give 1 to 2147483647 steps' \
  from-megatron -- "${M[@]}" --lr 1e-3 --train-samples 1e30
refused "lr_warmup_fraction: 1.0e.30 is out of range .--lr-warmup-fraction 1e30" from-megatron -- \
  "${M[@]}" --lr 1e-3 --train-iters 10 --lr-warmup-fraction 1e30
# --load as Megatron reads it: continue from the checkpoint there, or start afresh when none is.
"$BIN/triad-config" from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 --load ck --save ck \
  >"$WORK/load.yaml" 2>"$WORK/err.txt"
if grep -Eq "resume: true .*# --load ck \(continues from it" "$WORK/load.yaml"; then
  pass "--load is checkpoint.resume"
else fail "--load: $(cat "$WORK/load.yaml" "$WORK/err.txt")"; fi
# --train-samples rounds down to whole global batches, as Megatron's train_samples // batch.
"$BIN/triad-config" from-megatron -- "${M[@]}" --lr 1e-3 --train-samples 43 \
  >"$WORK/samples.yaml" 2>"$WORK/err.txt"
if grep -Eq "train_iters: 10 .*# --train-samples 43 / 4 per step" "$WORK/samples.yaml"; then
  pass "--train-samples 43 at global batch 4 is 10 steps"
  grep -Eq "lr_decay_samples: 43.0 .*# --train-samples 43 \(Megatron decays over" \
    "$WORK/samples.yaml" && pass "the decay spans the 43 samples" ||
    fail "decay: $(grep lr_ "$WORK/samples.yaml")"
else fail "--train-samples: $(grep train_iters "$WORK/samples.yaml") $(cat "$WORK/err.txt")"; fi
# Megatron's defaults, not Triad's, for what the arguments leave out; the given ones win.
"$BIN/triad-config" from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 --weight-decay 0.1 \
  --data-path d/x_text_document >"$WORK/defaults.yaml" 2>"$WORK/err.txt"
for want in "adam_beta2: 0.999 .*# Megatron's default \(no --adam-beta2\)" \
  "weight_decay: 0.1 .*# --weight-decay 0.1" "lr_decay_style: linear .*# Megatron's default" \
  "split: 969,30,1 .*# Megatron's default \(no --split\)" "eval_interval: 1000 " \
  "no --hidden-dropout \\(Megatron's default 0.1\\): Triad trains without dropout" \
  "lr_lag_steps: 1 "; do
  if grep -Eq "$want" "$WORK/defaults.yaml"; then pass "default: $want"
  else fail "from-megatron lacks '$want': $(cat "$WORK/defaults.yaml" "$WORK/err.txt")"; fi
done
refused 'subcommand' --strict
# Megatron drops out 10% unless told 0: --strict refuses a list that leaves it at its default.
# shellcheck disable=SC2046
refused 'no --hidden-dropout' from-megatron --strict -- $(cat gpt_125m.args)
# shellcheck disable=SC2046
if "$BIN/triad-config" from-megatron --strict -- $(cat gpt_125m.args) --hidden-dropout 0 \
  --attention-dropout 0 >/dev/null; then
  pass "--strict passes a list it carries whole"; else fail "--strict refused gpt_125m"; fi
# Without --deepspeed, Megatron-DeepSpeed never reads the JSON; --normalization in either spelling.
"$BIN/triad-config" from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 \
  --deepspeed_config ds_zero2.json --normalization layernorm >"$WORK/nods.yaml" 2>"$WORK/err.txt"
if grep -q "^#   --deepspeed_config ds_zero2.json: no effect without --deepspeed" "$WORK/nods.yaml" &&
  ! grep -q "ds_zero2.json: zero" "$WORK/nods.yaml" &&
  grep -q "^#   --normalization layernorm: no effect in Triad" "$WORK/nods.yaml"; then
  pass "--deepspeed_config without --deepspeed is not read"
else fail "without --deepspeed: $(cat "$WORK/nods.yaml" "$WORK/err.txt")"; fi
# --test-data-path alone: known, not carried over (Triad evaluates no test split).
"$BIN/triad-config" from-megatron -- "${M[@]}" --lr 1e-3 --train-iters 10 --train-data-path d/a \
  --valid-data-path d/v --test-data-path d/t >"$WORK/tdp.yaml" 2>"$WORK/err.txt"
if grep -q "^#   --test-data-path d/t: Triad does not evaluate a test split" "$WORK/tdp.yaml"; then
  pass "--test-data-path is listed as not carried over"
else fail "--test-data-path: $(grep -i test "$WORK/tdp.yaml" "$WORK/err.txt")"; fi

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
