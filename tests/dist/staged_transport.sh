#!/usr/bin/env bash
# The transport staged through host buffers (core/src/dist/transport_staging.cpp), run on the CPU
# device as a test double (TRIAD_STAGE_TRANSPORT=1 stages host memory too): the log says the
# transport runs through host buffers, and the golden-loss matrix (every layout: dp, tp + sequence
# parallelism, pp 1f1b and interleaved, ZeRO-1/2/3 + offload, tp x pp x dp, a resume) trains to
# the committed golden values, as without staging.
# Usage: staged_transport.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
export TRIAD_STAGE_TRANSPORT=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
rm -rf "$WORK" && mkdir -p "$WORK"
"$LAUNCH" --nproc-per-node 2 "$SRC/configs/gpt-tiny.yaml" --set model.num_layers=2 \
  --set training.train_iters=1 --set zero_optimization.stage=3 --set transport.tls=sm,self \
  --set output.dir="$WORK/probe" >"$WORK/probe.log" 2>&1 || { cat "$WORK/probe.log"; exit 1; }
grep -q "transport: ucx through host buffers" "$WORK/probe.log" ||
  { cat "$WORK/probe.log"; echo "FAIL: the log does not say the transport is staged"; exit 1; }
exec bash "$SRC/tests/dist/golden_losses.sh" "$LAUNCH" "$SRC" "$WORK/golden" "$PY"
