#!/usr/bin/env bash
# Validation loss (data.split + training.eval_interval / eval_iters): the same validation losses
# at steps 3, 6 and the last (7) for dp 1, 2 and 4 and tp 2 x pp 2 (≤ 1e-5), in metrics.jsonl
# (valid_loss, valid_ppl = exp) and in the summary; a separate data.valid_path; bad input (a
# split that does not parse, eval without validation data, a validation part without one
# sample) is exit 2 with one line, before training.
# Usage: validation_test.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -uo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
CFG="$SRC/configs/gpt-tiny.yaml"
export OMP_NUM_THREADS=1 UCX_TLS=sm,self UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n
common=(--quiet --set training.train_iters=7 --set training.global_batch_size=8
        --set training.micro_batch_size=2 --set training.gradient_accumulation_steps=0
        --set data.split=90,10,0 --set training.eval_interval=3 --set training.eval_iters=2)
fail() { echo "FAIL: $*"; exit 1; }
run() {  # NAME RANKS [--set ...]
  local name=$1 n=$2
  shift 2
  timeout 300 "$LAUNCH" "$CFG" --nproc-per-node "$n" "${common[@]}" --set output.dir="$name" "$@" \
    >"$name.log" 2>&1 || { cat "$name.log"; fail "$name exited $?"; }
}
run dp1 1
run dp2 2
run dp4 4
run tp2pp2 4 --set parallel.tensor_model_parallel_size=2 --set parallel.pipeline_model_parallel_size=2
grep -q "| validation loss [0-9.]* |" dp1.log || { cat dp1.log; fail "no validation loss in the summary"; }
"$PY" - <<'PY' || fail "validation losses differ between layouts"
import json, math
def valid(name):
    rows = [json.loads(l) for l in open(f"{name}/metrics.jsonl")]
    v = {r["step"]: r["valid_loss"] for r in rows if "valid_loss" in r}
    for r in rows:
        if "valid_loss" in r:
            assert abs(r["valid_ppl"] - math.exp(r["valid_loss"])) < 1e-9 * r["valid_ppl"]
    return v
ref = valid("dp1")
assert sorted(ref) == [3, 6, 7], ref
assert ref[3] != ref[6], "each evaluation reads new validation batches"
for name in ("dp2", "dp4", "tp2pp2"):
    got = valid(name)
    assert sorted(got) == [3, 6, 7], (name, got)
    for s in ref:
        assert abs(got[s] - ref[s]) <= 1e-5 * ref[s], (name, s, got[s], ref[s])
PY
echo "ok: validation losses at steps 3, 6, 7 equal for dp 1, 2, 4 and tp 2 x pp 2"

# data.valid_path: a file of its own, used whole.
head -c 20000 /usr/share/games/fortunes/literature >valid.txt
run vpath 1 --set data.split= --set data.valid_path=valid.txt
grep -q '"valid_loss"' vpath/metrics.jsonl || fail "no validation with data.valid_path"

bad() {  # PATTERN [--set ...]: refused with exit 2, one line, nothing trained
  local pat=$1
  shift
  timeout 60 "$LAUNCH" "$CFG" "${common[@]}" --set output.dir=bad "$@" >bad.log 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] || { cat bad.log; fail "exit $rc for '$pat'"; }
  grep -q -- "$pat" bad.log || { cat bad.log; fail "no '$pat'"; }
  [[ $(grep -c "error" bad.log) -eq 1 ]] || { cat bad.log; fail "not one line for '$pat'"; }
  [[ ! -e bad/metrics.jsonl ]] || fail "trained before refusing '$pat'"
}
bad "data.split '9x,1' has '9x'" --set data.split=9x,1
bad "training.eval_interval 3 (" --set data.split=
bad "leaves the validation part of text file" --set data.split=100000,1,0
echo "ok: bad splits and eval without validation data are refused"
