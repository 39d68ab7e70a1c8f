#!/usr/bin/env bash
# Tensor parallelism (tensor: megatron over ucx) reproduces the single-process run of a
# 2-layer gpt-tiny with the same global batch (8 samples):
#   - the loss and gradient norm at each of 20 steps, to 1e-5 relative, for tp 2 and 4, with
#     and without sequence parallelism, learned positions + naive attention and rotary
#     positions + flash2 (small tiles), and tp 2 x dp 2;
#   - step 1's gradients, gathered to whole tensors, to 1e-5 of each tensor's largest;
#   - export_hf after one step of lr 1e-7 (so the file holds the initial weights, gathered from
#     the ranks' slices, to ~1e-9): the same tensors within 1e-6 (vocabulary padding dropped);
#   - init_from_hf into tp 2: the single-process step-1 loss.
# tp 4 pads the vocabulary of 256 to 512: two ranks hold padding only.
# Usage: tp_equivalence.sh TRIAD_LAUNCH TP_GRADS SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 GRADS=$2 SRC=$3 WORK=$4 PY=$5
rm -rf "$WORK" && mkdir -p "$WORK"
CFG="$SRC/configs/gpt-tiny.yaml"
common=(--set model.num_layers=2 --set training.global_batch_size=8
        --set training.micro_batch_size=4 --set training.gradient_accumulation_steps=0
        --set transport.tls=sm,self)
flash=(--set model.position_embedding=rope --set attention.name=flash2
       --set attention.block_q=16 --set attention.block_k=16
       --set attention.bwd_block_q=16 --set attention.bwd_block_k=16)
# run NAME RANKS TP SP [extra --set ...]: 20 training steps, metrics in $WORK/NAME.
run() {
  local name=$1 n=$2 tp=$3 sp=$4
  shift 4
  OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node "$n" "$CFG" "${common[@]}" \
    --set training.train_iters=20 --set parallel.tensor_model_parallel_size="$tp" \
    --set parallel.sequence_parallel="$sp" --set "output.dir=$WORK/$name" "$@" \
    > "$WORK/$name.log" 2>&1 || { echo "run $name failed:"; cat "$WORK/$name.log"; exit 1; }
  if [ "$tp" -gt 1 ]; then
    grep -q "layout: world $n = tp $tp x pp 1 x dp $((n / tp)); tensor: megatron" "$WORK/$name.log" ||
      { echo "FAIL $name: no layout line saying tp $tp:"; cat "$WORK/$name.log"; exit 1; }
    # The traffic the engine counted equals Megatron's formula exactly.
    grep -Eq "traffic per step per rank: counted ([0-9]+) B .*formula \1 B" "$WORK/$name.log" ||
      { echo "FAIL $name: counted traffic differs from the formula:";
        grep traffic "$WORK/$name.log"; exit 1; }
  fi
}
# grads NAME RANKS TP SP [extra]: one step, whole gradients and an HF export in $WORK/NAME.
grads() {
  local name=$1 n=$2 tp=$3 sp=$4
  shift 4
  OMP_NUM_THREADS=1 "$LAUNCH" --nproc-per-node "$n" --exec "$GRADS" "$CFG" "$WORK/$name" \
    "${common[@]}" --set training.train_iters=1 --set parallel.tensor_model_parallel_size="$tp" \
    --set parallel.sequence_parallel="$sp" --set "output.export_hf=$WORK/$name/hf" \
    --set optimizer.lr=1e-7 --set optimizer.min_lr=0 "$@" \
    > "$WORK/$name.log" 2>&1 || { echo "grads $name failed:"; cat "$WORK/$name.log"; exit 1; }
}
run single 1 1 false
run tp2 2 2 false
run tp2sp 2 2 true
run tp4 4 4 false
run tp4sp 4 4 true
run tp2dp2sp 4 2 true
run single_rope 1 1 false "${flash[@]}"
run tp2sp_rope 2 2 true "${flash[@]}"
grads g_single 1 1 false
grads g_tp2sp 2 2 true
grads g_tp4 4 4 false
# From the single process's one-step export, tp 2 starts where the single process does.
run from_hf_single 1 1 false --set "output.init_from_hf=$WORK/g_single/hf" --set training.train_iters=1
run from_hf_tp2 2 2 true --set "output.init_from_hf=$WORK/g_single/hf" --set training.train_iters=1

"$PY" - "$WORK" "$SRC/tests/reference" <<'PYEOF'
import json, sys
import numpy as np
work, ref = sys.argv[1], sys.argv[2]
sys.path.insert(0, ref)
from gpt_torch import read_safetensors

fails = 0
def fail(msg):
    global fails
    fails += 1
    print("FAIL", msg)

def metrics(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}/metrics.jsonl")]
    return rows

checks = 0
for base, others in (("single", ["tp2", "tp2sp", "tp4", "tp4sp", "tp2dp2sp"]),
                     ("single_rope", ["tp2sp_rope"])):
    a = metrics(base)
    if [r["step"] for r in a] != list(range(1, 21)):
        fail(f"{base}: steps {[r['step'] for r in a]}")
    for o in others:
        b = metrics(o)
        if len(b) != len(a):
            fail(f"{o}: {len(b)} steps, expected {len(a)}")
            continue
        worst = 0.0
        for x, y in zip(a, b):
            for key in ("loss", "grad_norm"):
                rel = abs(x[key] - y[key]) / abs(x[key])
                worst = max(worst, rel)
                checks += 1
                if not rel <= 1e-5:
                    fail(f"{o} step {x['step']}: {key} {y[key]:.8f} vs {base} {x[key]:.8f} (rel {rel:.2e})")
        print(f"{o:12} vs {base:12}: 20 steps, worst relative loss/grad-norm difference {worst:.2e}")

def compare_files(what, path, others, measure, limit):
    """Each other run's file has the same tensors as the single run's, within `limit`."""
    ref_t = read_safetensors(f"{work}/g_single/{path}")
    global checks
    for o in others:
        t = read_safetensors(f"{work}/{o}/{path}")
        if set(t) != set(ref_t):
            fail(f"{o} {what}: tensors {sorted(set(t) ^ set(ref_t))} differ")
            continue
        worst = 0.0
        for name, r in ref_t.items():
            checks += 1
            if t[name].shape != r.shape:
                fail(f"{o} {what} {name}: shape {t[name].shape} vs {r.shape}")
                continue
            err = measure(t[name].astype(np.float64), r)
            worst = max(worst, err)
            if not err <= limit:
                fail(f"{o} {what} {name}: differs by {err:.2e}")
        print(f"{o:12} {what} of {len(ref_t)} tensors: worst difference {worst:.2e}")

# Step 1's whole gradients, relative to each tensor's largest element.
compare_files("gradients", "grads.safetensors", ("g_tp2sp", "g_tp4"),
              lambda x, r: float(np.abs(x - r).max()) / (float(np.abs(r).max()) or 1.0), 1e-5)
# export_hf after one step (padding dropped), absolute.
compare_files("export_hf", "hf/model.safetensors", ("g_tp2sp", "g_tp4"),
              lambda x, r: float(np.abs(x - r).max()), 1e-6)

# init_from_hf into tp 2 gives the single-process step-1 loss.
a, b = metrics("from_hf_single")[0]["loss"], metrics("from_hf_tp2")[0]["loss"]
checks += 1
if not abs(a - b) <= 1e-5 * abs(a):
    fail(f"init_from_hf: tp 2 step-1 loss {b:.8f} vs single {a:.8f}")
print(f"init_from_hf step-1 loss: single {a:.7f}, tp 2 {b:.7f}")
print(f"{checks - fails} passed, {fails} failed")
sys.exit(1 if fails else 0)
PYEOF
