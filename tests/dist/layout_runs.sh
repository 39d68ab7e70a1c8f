# Shared by the scripts that train gpt-tiny under several layouts and compare what they wrote
# (golden_losses.sh, loss_scaling.sh). Source it after setting LAUNCH, SRC and WORK; it sets
# CFG and `common` (the short fixture both train: 4 layers unless a run says otherwise, global
# batch 8 of micro-batches of 2, lr 1e-3 with 2 warmup steps) and defines:
#   run NAME RANKS [ARGS...]: one job into $WORK/NAME (its log $WORK/NAME.log; a failure prints
#     the log and exits); tp N, pp N, zero N: the --set of that size.
CFG="$SRC/configs/gpt-tiny.yaml"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
common=(--quiet --set model.num_layers=4 --set training.global_batch_size=8
        --set training.micro_batch_size=2 --set training.gradient_accumulation_steps=0
        --set lr_schedule.lr_warmup_iters=2 --set training.train_iters=10
        --set optimizer.lr=1e-3 --set optimizer.min_lr=1e-4 --set transport.tls=sm,self)
run() {
  local name=$1 n=$2
  shift 2
  timeout 300 "$LAUNCH" --nproc-per-node "$n" "$CFG" "${common[@]}" \
    --set "output.dir=$WORK/$name" "$@" > "$WORK/$name.log" 2>&1 ||
    { echo "FAIL: run $name exited $?:"; cat "$WORK/$name.log"; exit 1; }
}
tp() { echo "--set parallel.tensor_model_parallel_size=$1"; }
pp() { echo "--set parallel.pipeline_model_parallel_size=$1"; }
zero() { echo "--set zero_optimization.stage=$1"; }
