#!/usr/bin/env bash
# Pipelines on a transport whose messages carry no tags (nccl's kind, which matches send/recv in
# the order posted): the ucx transport with `tags: false` advertises no tags and refuses any tag
# but 0, and every shipped schedule (gpipe, 1f1b, zb-h1 on 2 and 4 stages, interleaved on 2
# stages with 2 chunks, one with validation passes between steps) trains to the same bits as
# with tags, each message matched by the order the stages post them.
# Usage: pipeline_untagged.sh TRIAD_LAUNCH SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
LAUNCH=$1 SRC=$2 WORK=$3 PY=$4
rm -rf "$WORK" && mkdir -p "$WORK"
source "$SRC/tests/dist/layout_runs.sh"
# name|stages|args
layouts=(
  "gpipe|2|--set pipeline=gpipe"
  "1f1b|2|--set pipeline=1f1b --set training.eval_interval=4 --set training.eval_iters=2 --set data.split=90,10,0"
  "zbh1|2|--set pipeline=zb-h1"
  "1f1b4|4|--set pipeline=1f1b"
  "zbh14|4|--set pipeline=zb-h1"
  "interleaved|2|--set pipeline=interleaved --set parallel.virtual_pipeline_model_parallel_size=2"
)
for row in "${layouts[@]}"; do
  IFS='|' read -r name n args <<< "$row"
  for tags in true false; do
    # shellcheck disable=SC2086  # args are --set pairs
    run "$name-$tags" "$n" $(pp "$n") $args --set "transport.tags=$tags"
  done
done
"$PY" - "$WORK" "${layouts[@]}" <<'PYEOF'
import json, sys
work, rows = sys.argv[1], [r.split("|") for r in sys.argv[2:]]
fails = 0
for name, n, _ in rows:
    a, b = ([json.loads(l) for l in open(f"{work}/{name}-{t}/metrics.jsonl")] for t in ("true", "false"))
    keys = ("loss", "grad_norm", "valid_loss")
    ta = [[r.get(k) for k in keys] for r in a]
    tb = [[r.get(k) for k in keys] for r in b]
    if name == "1f1b" and sum(r.get("valid_loss") is not None for r in b) < 2:
        fails += 1
        print(f"FAIL {name}: the untagged run has no validation passes")
    if len(a) != 10 or ta != tb:
        fails += 1
        print(f"FAIL {name}: {len(a)} and {len(b)} steps; tagged {ta} vs untagged {tb}")
    else:
        print(f"{name}: 10 steps alike, tagged and untagged")
print(f"{'FAILED' if fails else 'passed'}: {fails} failures")
sys.exit(1 if fails else 0)
PYEOF
