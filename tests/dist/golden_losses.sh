#!/usr/bin/env bash
# Golden losses (Megatron-LM's habit): a fixed matrix of layouts trains gpt-tiny from seed 1234
# (lr 1e-3) for 10 steps, and each step's loss and gradient norm (and the validation losses) are compared
# with the values committed in golden_losses.json, so a change that moves numerics is seen at
# once, in whichever layout it touches.
#   layouts: single process (with export_hf), dp 2 ZeRO-1, tp 2 + sequence parallelism, pp 2
#   1f1b, interleaved pp 2 x 2 chunks, ZeRO-3 + optimizer offload on dp 2, tp 2 x pp 2 x dp 2,
#   full activation recomputation, dp 2 ZeRO-2 stopped after step 5 and resumed from its
#   checkpoint, and evaluation every 5 steps (with Megatron's second evaluation after step 10).
# Tolerance (golden_losses.py): 1e-5 relative per value. Measured on this fixture (lr 1e-3, a
# smooth descent: rounding differences do not blow up after a spike): every other summation
# order moves the values by at most 1.3e-7 relative over the 10 steps: the other GEMM library
# (device.gemm openblas vs onednn) 1.3e-7, 2 threads instead of 1 1e-14, and the layouts among
# themselves (tp, pp, dp against the single process) 8e-8. Another x86 CPU's GEMMs round like
# that, so 1e-5 leaves ~75x room; a real numerics change moves them further: learning rate 0.1%
# off 2.6e-4, Adam's epsilon 1e-8 -> 1e-7 1.1e-4, weight decay 0.1 -> 0.11 1.8e-5.
# Usage: golden_losses.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON [--write | --exact | --rtol X]
#   (no option)  compare with tests/dist/golden_losses.json at the default tolerance
#   --exact      bit for bit, and the single run's export_hf file too (a refactor on one machine)
#   --write      run the matrix and write the results as the new golden file
#   TRIAD_GOLDEN_EXTRA="--set a=b ..." adds overrides to every run (to measure the tolerance).
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
shift 4
rm -rf "$WORK" && mkdir -p "$WORK"
# shellcheck source=layout_runs.sh
source "$SRC/tests/dist/layout_runs.sh"
# shellcheck disable=SC2206
extra=(${TRIAD_GOLDEN_EXTRA:-})
# The golden runs add TRIAD_GOLDEN_EXTRA's overrides to every run.
golden_run() { local name=$1 n=$2; shift 2; run "$name" "$n" "$@" "${extra[@]}"; }
# shellcheck disable=SC2046
{
  golden_run single 1 --set "output.export_hf=$WORK/single/hf"
  golden_run dp2_zero1 2 $(zero 1)
  golden_run tp2_sp 2 $(tp 2) --set parallel.sequence_parallel=true
  golden_run pp2_1f1b 2 $(pp 2)
  golden_run pp2_interleaved2 2 $(pp 2) --set parallel.virtual_pipeline_model_parallel_size=2
  golden_run dp2_zero3_offload 2 $(zero 3) --set zero_optimization.offload_optimizer.device=cpu
  golden_run tp2_pp2_dp2 8 $(tp 2) $(pp 2) --set parallel.sequence_parallel=true
  golden_run recompute_full 1 --set training.checkpoint_activations=true
  golden_run dp2_zero2_resumed 2 $(zero 2) --set "checkpoint.save=$WORK/dp2_zero2_resumed/ckpt" \
    --set training.exit_interval=5
  golden_run dp2_zero2_resumed 2 $(zero 2) --set "checkpoint.load=$WORK/dp2_zero2_resumed/ckpt"
  golden_run evaluation 1 --set training.eval_interval=5 --set training.eval_iters=2 \
    --set data.split=90,10,0
}
exec "$PY" "$SRC/tests/dist/golden_losses.py" "$WORK" "$SRC/tests/dist/golden_losses.json" "$@"
