# Shared by layout_equivalence.sh and context_equivalence.sh, which train a layout and compare it
# with one process. Source it after `LAUNCH=$1 GRADS=$2 SRC=$3 WORK=$4 PY=$5` (their common
# arguments); it empties WORK and sets CFG, `common` (4-layer gpt-tiny, global batch 8 of
# micro-batches of 4, ucx over shared memory) and `flash` (rotary positions and flash2 with
# 16-token tiles, so a 64-token sequence spans several).
rm -rf "$WORK" && mkdir -p "$WORK"
CFG="$SRC/configs/gpt-tiny.yaml"
common=(--set model.num_layers=4 --set training.global_batch_size=8
        --set training.micro_batch_size=4 --set training.gradient_accumulation_steps=0
        --set transport.tls=sm,self)
flash=(--set model.position_embedding=rope --set attention.name=flash2
       --set attention.block_q=16 --set attention.block_k=16
       --set attention.bwd_block_q=16 --set attention.bwd_block_k=16)
