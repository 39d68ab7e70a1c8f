#!/usr/bin/env bash
# triad-launch --deepspeed_config: each DeepSpeed JSON of tests/config/deepspeed/ (ZeRO-1 + bf16,
# ZeRO-3 + offload + fp16, "auto" values, two of the batch triple, each scheduler type) gives the
# same --dry-run (resolved config, layout, memory, FLOPs) as the YAML written by hand beside it;
# the keys without effect are listed once; each refused key is one line naming it, exit 2; a YAML
# key and a JSON key that disagree are one error naming both; --set wins over either.
# Usage: deepspeed_import.sh TRIAD_LAUNCH CASES_DIR WORK_DIR
set -u
LAUNCH=$1 CASES=$(cd "$2" && pwd) WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fails=0 passes=0
pass() { echo "PASS $1"; passes=$((passes + 1)); }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }

# The dry run without what names the config file (comments, "runs here", the notes).
report() { grep -v '^#\|^runs here\|^no effect' "$1"; }

# same JSON YAML BASE [LAUNCH FLAGS...]: BASE + JSON and YAML give the same report.
same() {
  local json=$1 yaml=$2 base=$3
  shift 3
  if ! "$LAUNCH" "$CASES/$base" --deepspeed_config "$CASES/$json" --dry-run "$@" >a.txt 2>&1; then
    fail "$json: $(cat a.txt)"; return
  fi
  "$LAUNCH" "$CASES/$yaml" --dry-run "$@" >b.txt 2>&1 || { fail "$yaml: $(cat b.txt)"; return; }
  if diff <(report a.txt) <(report b.txt) >diff.txt; then pass "$json = $yaml"; else
    fail "$json differs from $yaml:"; cat diff.txt; fi
}
same zero1_bf16.json zero1_bf16.yaml base.yaml --nproc-per-node 2
same zero3_offload_fp16.json zero3_offload_fp16.yaml base.yaml --nproc-per-node 2
same auto.json auto.yaml auto_base.yaml --nproc-per-node 2
same two_of_three.json two_of_three.yaml base.yaml --nproc-per-node 2
same cosine.json cosine.yaml base.yaml
same adam_only.json adam_only.yaml base.yaml

# The same JSON given as deepspeed_config: in the YAML, and as --deepspeed-config.
{ cat "$CASES/base.yaml"; echo "deepspeed_config: $CASES/zero1_bf16.json"; } >key.yaml
"$LAUNCH" key.yaml --dry-run --nproc-per-node 2 >a.txt 2>&1
"$LAUNCH" "$CASES/zero1_bf16.yaml" --dry-run --nproc-per-node 2 >b.txt 2>&1
if diff <(report a.txt) <(report b.txt) >/dev/null; then pass "deepspeed_config: key"; else
  fail "deepspeed_config: key differs"; fi
"$LAUNCH" "$CASES/base.yaml" --deepspeed-config "$CASES/zero1_bf16.json" --dry-run \
  --nproc-per-node 2 >a.txt 2>&1
if diff <(report a.txt) <(report b.txt) >/dev/null; then pass "--deepspeed-config"; else
  fail "--deepspeed-config differs"; fi

# Keys without effect: each listed once, with why.
"$LAUNCH" "$CASES/base.yaml" --deepspeed_config "$CASES/zero1_bf16.json" --dry-run \
  --nproc-per-node 2 >a.txt 2>&1
for key in steps_per_print wall_clock_breakdown zero_optimization.contiguous_gradients; do
  n=$(grep -c "^no effect: .*json: $key: no effect in Triad (.*)" a.txt)
  if [[ $n -eq 1 ]]; then pass "no effect: $key once"; else
    fail "no effect: $key listed $n times"; fi
done

# refused JSON WANT...: exit 2, one line on stderr "triad-launch: error: ..." holding each WANT.
refused() {
  local json=$1
  shift
  printf '%s\n' "$json" >c.json
  "$LAUNCH" "$CASES/base.yaml" --deepspeed_config c.json --dry-run >out.txt 2>err.txt
  local rc=$? lines
  lines=$(grep -c . err.txt)
  if [[ $rc -ne 2 || $lines -ne 1 || -s out.txt ]]; then
    fail "$json: exit $rc, $lines lines: $(cat err.txt out.txt)"; return
  fi
  for want in "triad-launch: error: " "$@"; do
    grep -qF -- "$want" err.txt || { fail "$json: lacks '$want': $(cat err.txt)"; return; }
  done
  pass "refused $json: $(cat err.txt)"
}
refused '{"optimizer": {"type": "Lamb"}}' 'optimizer.type' 'AdamW'
refused '{"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.1}}}' \
  'optimizer.params.adam_w_mode' 'true'
refused '{"optimizer": {"type": "AdamW", "params": {"momentum": 0.9}}}' 'optimizer.params.momentum'
refused '{"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}}' 'optimizer.params.betas' 'two numbers'
refused '{"optimizer": {"type": "AdamW", "params": {"bias_correction": false}}}' \
  'optimizer.params.bias_correction is false' 'always corrects'
refused '{"gradient_clipping": 1e400}' 'cannot be read' '1e400'
refused '{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}' \
  'zero_optimization.offload_param' 'none'
refused '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}}' \
  'offload_optimizer.device' '"cpu"'
refused '{"zero_optimization": {"stage": "three"}}' 'zero_optimization.stage' 'three'
refused '{"scheduler": {"type": "OneCycle", "params": {}}}' 'scheduler.type' 'WarmupLR'
# DeepSpeed's warm-up is log-shaped unless the file says "linear".
printf '%s\n' '{"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}}' >c.json
"$LAUNCH" "$CASES/base.yaml" --deepspeed_config c.json --dry-run >out.txt 2>&1
if grep -q "lr_warmup_style: log" out.txt; then pass "WarmupLR without warmup_type: log"; else
  fail "WarmupLR without warmup_type: $(cat out.txt)"; fi
refused '{"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "exp"}}}' \
  'scheduler.params.warmup_type' '"log" and "linear"'
refused '{"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-5}}}' \
  'scheduler.params.warmup_min_lr' '0'
refused '{"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 5}}}' \
  'total_num_steps'
refused '{"fp16": {"enabled": true, "auto_cast": true}}' 'fp16.auto_cast'
refused '{"autotuning": {"enabled": true}}' 'autotuning' 'triad-autotune'
refused '{"elasticity": {"enabled": true}}' 'elasticity'
refused '{"sparse_attention": {"mode": "fixed"}}' 'sparse_attention' 'flash2'
refused '{"train_batch_sise": 8}' 'train_batch_sise' "did you mean 'train_batch_size'"
refused '{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 4}' 'global_batch_size 30' 'micro_batch_size 4' \
  'gradient_accumulation_steps 4' 'c.json: train_batch_size'
refused '{"train_batch_size": 7, "train_micro_batch_size_per_gpu": 2}' 'global_batch_size 7'
refused '{"train_batch_size": 8, "train_batch_size": 16}' "'train_batch_size' twice"
refused '{"train_batch_size": 8,' 'c.json' 'not valid JSON'
refused '[1, 2]' 'c.json' 'JSON object'

# A YAML key and a JSON key that disagree: one error naming both; equal values are fine.
printf '%s\n' 'model: {num_layers: 2}' 'training: {micro_batch_size: 4}' \
  'deepspeed_config: c.json' >y.yaml
echo '{"train_micro_batch_size_per_gpu": 8}' >c.json
"$LAUNCH" y.yaml --dry-run >out.txt 2>err.txt
rc=$?
want="training.micro_batch_size is 4 (y.yaml:2:30) but 8 (c.json: train_micro_batch_size_per_gpu)"
if [[ $rc -eq 2 && $(grep -c . err.txt) -eq 1 ]] && grep -qF "$want" err.txt; then
  pass "conflict: $(cat err.txt)"; else fail "conflict: exit $rc: $(cat err.txt)"; fi
echo '{"train_micro_batch_size_per_gpu": 4.0}' >c.json
if "$LAUNCH" y.yaml --dry-run >out.txt 2>&1; then pass "equal values agree"; else
  fail "equal values: $(cat out.txt)"; fi
# --set wins over the JSON.
echo '{"train_micro_batch_size_per_gpu": 8}' >c.json
if "$LAUNCH" y.yaml --dry-run --set training.micro_batch_size=2 2>&1 |
  grep -q '^  micro_batch_size: 2$'; then
  pass "--set wins"
else
  fail "--set does not win over the JSON"
fi
# A missing file: one line naming it.
"$LAUNCH" "$CASES/base.yaml" --deepspeed_config missing.json --dry-run >out.txt 2>err.txt
if [[ $? -eq 2 && $(grep -c . err.txt) -eq 1 ]] && grep -q "missing.json" err.txt; then
  pass "missing file"; else fail "missing file: $(cat err.txt)"; fi

# A FIFO is refused by name, never opened (no hang).
mkfifo fifo.json
timeout 20 "$LAUNCH" "$CASES/base.yaml" --deepspeed_config fifo.json --dry-run >out.txt 2>err.txt
if [[ $? -eq 2 && $(grep -c . err.txt) -eq 1 ]] && grep -q "'fifo.json' is a FIFO" err.txt; then
  pass "FIFO refused"; else fail "FIFO: $(cat err.txt)"; fi

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
