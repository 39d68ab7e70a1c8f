#!/usr/bin/env bash
# Every bad input to triad-launch: one clear message on one line, exit code 2, no stack
# trace, and nothing written to the output folder.
# Usage: bad_input.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR
set -u
LAUNCH=$1 SRC=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
BASE="$SRC/configs/gpt-tiny.yaml"
OUT="$WORK/out"
fails=0 passes=0

expect_error() {  # name, expected substring, args...
  local name=$1 want=$2
  shift 2
  rm -rf "$OUT"
  local err rc
  err=$("$LAUNCH" "$@" --set "output.dir=$OUT" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $rc -ne 2 ]]; then
    echo "FAIL $name: exit code $rc, expected 2 ($err)"; fails=$((fails + 1))
  elif [[ $lines -ne 1 ]]; then
    echo "FAIL $name: expected one line, got $lines:"; echo "$err"; fails=$((fails + 1))
  elif [[ "$err" != *"$want"* ]]; then
    echo "FAIL $name: message lacks '$want': $err"; fails=$((fails + 1))
  elif [[ -e "$OUT" ]]; then
    echo "FAIL $name: output folder was created"; fails=$((fails + 1))
  else
    echo "PASS $name: $err"; passes=$((passes + 1))
  fi
}

expect_error missing_config "not found" "$WORK/nope.yaml"
printf 'model:\n  num_layers: [1, 2\n' > "$WORK/syntax.yaml"
expect_error yaml_syntax "syntax.yaml:" "$WORK/syntax.yaml"
expect_error unknown_key "micro_batch_size" "$BASE" --set training.micro_batch_sise=4
expect_error wrong_type "num_layers" "$BASE" --set model.num_layers=four
expect_error out_of_range "num_layers" "$BASE" --set model.num_layers=0
expect_error inconsistent_batch "global_batch_size" "$BASE" --set training.global_batch_size=7 \
  --set training.gradient_accumulation_steps=2
expect_error unknown_plugin "flash9" "$BASE" --set attention=flash9
expect_error unknown_plugin_param "attention." "$BASE" --set attention.no_such_param=1
printf 'abc' > "$WORK/odd.bin"
expect_error truncated_tokens "odd.bin" "$BASE" --set data.kind=tokens --set data.path="$WORK/odd.bin"
mkdir -p "$WORK/hf"
printf '{"n_layer": 4, "n_embd": 128, "n_head": 4, "vocab_size": 256, "n_positions": 64}' > "$WORK/hf/config.json"
printf '\xff\xff\xff\xff\xff\xff\x00\x00{}' > "$WORK/hf/model.safetensors"
expect_error corrupt_safetensors "model.safetensors" "$BASE" --set output.init_from_hf="$WORK/hf"
expect_error missing_text "no-such-text.txt" "$BASE" --set data.path="$WORK/no-such-text.txt"
expect_error head_dim_unsupported "head dim 512" "$BASE" --set model.hidden_size=1024 \
  --set model.num_attention_heads=2
expect_error tensor_parallel "tensor_model_parallel_size" "$BASE" --set parallel.tensor_model_parallel_size=2
# Tensor parallelism's rules, checked by the launcher before any rank starts.
expect_error tp_heads "num_attention_heads 3 is not divisible" "$BASE" --nproc-per-node 2 \
  --set parallel.tensor_model_parallel_size=2 --set model.hidden_size=96 --set model.num_attention_heads=3
expect_error tp_sequence "seq_length 63 is not divisible" "$BASE" --nproc-per-node 2 \
  --set parallel.tensor_model_parallel_size=2 --set parallel.sequence_parallel=true --set model.seq_length=63
expect_error tp_world "world size 3 is not divisible by tensor_model_parallel_size 2" "$BASE" \
  --nproc-per-node 3 --set parallel.tensor_model_parallel_size=2
expect_error tp_plugin_lacks "tensor plugin 'none' cannot plan tp 2" "$BASE" --nproc-per-node 2 \
  --set parallel.tensor_model_parallel_size=2 --set tensor=none
expect_error tp_unknown_plugin "megatrom" "$BASE" --nproc-per-node 2 \
  --set parallel.tensor_model_parallel_size=2 --set tensor=megatrom
# A ZeRO stage the data plugin's capabilities do not list.
expect_error zero_stage "zero_optimization.stage 4" "$BASE" --set zero_optimization.stage=4
expect_error zero_stage_dp "zero_optimization.stage 4" "$BASE" --nproc-per-node 2 \
  --set zero_optimization.stage=4
# Pipeline parallelism's rules.
expect_error pp_layers "num_layers 4 is not divisible by parallel.pipeline_model_parallel_size 3" \
  "$BASE" --nproc-per-node 3 --set parallel.pipeline_model_parallel_size=3
expect_error pp_partition "pipeline_partition '1,2'" "$BASE" --nproc-per-node 2 \
  --set parallel.pipeline_model_parallel_size=2 --set parallel.pipeline_partition=1,2
expect_error pp_world "world size 3 is not divisible by tensor_model_parallel_size 1 × pipeline_model_parallel_size 2" \
  "$BASE" --nproc-per-node 3 --set parallel.pipeline_model_parallel_size=2
expect_error pp_unknown_schedule "1f1c" "$BASE" --nproc-per-node 2 \
  --set parallel.pipeline_model_parallel_size=2 --set pipeline=1f1c
expect_error vpp_layers "num_layers 4 is not divisible by pipeline_model_parallel_size 2 x virtual_pipeline_model_parallel_size 4" \
  "$BASE" --nproc-per-node 2 --set parallel.pipeline_model_parallel_size=2 \
  --set parallel.virtual_pipeline_model_parallel_size=4
expect_error vpp_micro_batches "interleaved" "$BASE" --nproc-per-node 2 \
  --set parallel.pipeline_model_parallel_size=2 --set parallel.virtual_pipeline_model_parallel_size=2 \
  --set training.micro_batch_size=8 --set training.gradient_accumulation_steps=3 --set training.global_batch_size=0
expect_error world_mismatch "data_parallel_size" "$BASE" --nproc-per-node 2 --set parallel.data_parallel_size=4

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
