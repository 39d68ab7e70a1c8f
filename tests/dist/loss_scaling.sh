#!/usr/bin/env bash
# fp16's loss scaler on the CPU: the scaler runs over fp32 math (precision fp32 with
# fp16.enabled), and overflow is forced two ways: TRIAD_INJECT_OVERFLOW puts an inf into one
# rank's gradients at chosen steps (the job must agree to skip them), and a loss scale beyond
# fp32's range (2^131) overflows by itself. loss_scaling.py checks what the runs wrote:
#   - a scale that never overflows changes nothing (losses and norms as without the scaler);
#   - skipped steps are the injected ones; the scale follows DeepSpeed's rule; the learning-rate
#     schedule and Adam's step count stand still over them; the checkpoints of skipped steps
#     hold the weights and moments of the step before, bit for bit;
#   - tp 2 with sequence parallelism, pp 2, ZeRO-1 and ZeRO-3 + offload at dp 2, tp 2 x pp 2,
#     each with the overflow on its last rank, against the single process (1e-5 relative, as the
#     golden losses);
#   - a scale of 2^100 (finite gradients, their scaled squares beyond fp32) under pp 2 and
#     ZeRO-1 trains as without the scaler: the gradient norm is unscaled before any sum;
#   - a run stopped after step 4 and resumed from its checkpoint equals the run that never
#     stopped, bit for bit (scale, hysteresis and skipped count carried over).
# Usage: loss_scaling.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
rm -rf "$WORK" && mkdir -p "$WORK"
# shellcheck source=layout_runs.sh
source "$SRC/tests/dist/layout_runs.sh"
common+=(--set model.num_layers=2 --set training.train_iters=8)
scaled=(--set precision=fp32 --set fp16.enabled=true --set fp16.loss_scale_window=2
        --set fp16.hysteresis=2)
INJECT=2,3,6
# shellcheck disable=SC2046
{
  run plain 1
  run clean 1 "${scaled[@]}"
  TRIAD_INJECT_OVERFLOW=$INJECT@0 run single 1 "${scaled[@]}" \
    --set "checkpoint.save=$WORK/single/ckpt" --set checkpoint.save_interval=1
  TRIAD_INJECT_OVERFLOW=$INJECT@1 run tp2_sp 2 "${scaled[@]}" $(tp 2) \
    --set parallel.sequence_parallel=true
  TRIAD_INJECT_OVERFLOW=$INJECT@1 run pp2 2 "${scaled[@]}" $(pp 2)
  TRIAD_INJECT_OVERFLOW=$INJECT@1 run dp2_zero1 2 "${scaled[@]}" $(zero 1)
  TRIAD_INJECT_OVERFLOW=$INJECT@1 run dp2_zero3_offload 2 "${scaled[@]}" $(zero 3) \
    --set zero_optimization.offload_optimizer.device=cpu
  TRIAD_INJECT_OVERFLOW=$INJECT@3 run tp2_pp2 4 "${scaled[@]}" $(tp 2) $(pp 2)
  for half in 1 2; do
    TRIAD_INJECT_OVERFLOW=$INJECT@0 run resumed 1 "${scaled[@]}" \
      --set "checkpoint.save=$WORK/resumed/ckpt" --set checkpoint.resume=true \
      $( ((half == 1)) && echo "--set training.exit_interval=4")
  done
  # 2^100: the gradients stay finite in fp32, but their scaled sum of squares is beyond it.
  huge=(--set precision=fp32 --set fp16.enabled=true --set fp16.initial_scale_power=100)
  run huge_pp2 2 "${huge[@]}" $(pp 2)
  run huge_dp2_zero1 2 "${huge[@]}" $(zero 1)
  run beyond_fp32 1 --set precision=fp32 --set fp16.enabled=true \
    --set fp16.initial_scale_power=131 --set fp16.hysteresis=1 --set training.train_iters=6
}
exec "$PY" "$SRC/tests/dist/loss_scaling.py" "$WORK" "$INJECT"
