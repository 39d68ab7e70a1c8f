#!/usr/bin/env bash
# triad-estimate's command line: the table (rows ZeRO 0-3, the configured one marked) and the
# one-line verdict (fits: exit 0; does not fit, with the cheapest change: exit 1); bad input is
# one line on stderr and exit 2.
# Usage: estimate_cli.sh TRIAD_ESTIMATE SOURCE_DIR WORK_DIR
set -euo pipefail
EST=$1 SRC=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
CFG="$SRC/configs/gpt-tiny.yaml"
tiny=(--set model.num_layers=4 --set training.micro_batch_size=1 --set training.global_batch_size=0
      --set training.gradient_accumulation_steps=1)
fail() { echo "FAIL: $*"; exit 1; }
# expect RC NAME ARGS...: runs triad-estimate, keeps stdout in $WORK/NAME.out, stderr in .err.
expect() {
  local want=$1 name=$2 rc=0
  shift 2
  "$EST" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err" || rc=$?
  [ "$rc" -eq "$want" ] || { cat "$WORK/$name.out" "$WORK/$name.err"; fail "$name: exit $rc, want $want"; }
}
expect 0 fits "$CFG" --world 2 "${tiny[@]}" --set zero_optimization.stage=1 --memory-per-device 1TiB
grep -Eq '^ \*    1 ' "$WORK/fits.out" || fail "fits: ZeRO 1 not marked as configured"
for s in 0 2 3; do grep -Eq "^      $s " "$WORK/fits.out" || fail "fits: no row for ZeRO $s"; done
grep -q '(8Ψ+8Ψ/N)' "$WORK/fits.out" || fail "fits: no paper formula for stage 1"
tail -1 "$WORK/fits.out" | grep -Eq '^fits: [0-9.]+ MiB per rank at ZeRO stage 1, limit 1024.00 GiB' ||
  fail "fits: last line is '$(tail -1 "$WORK/fits.out")'"
# Between ZeRO 1's need and ZeRO 0's: stage 1 is the cheapest change.
need() { "$EST" "$CFG" --world 2 "${tiny[@]}" --set zero_optimization.stage="$1" --json |
           sed -n 's/^  "peak_per_rank": \([0-9]*\),$/\1/p'; }
n0=$(need 0) n1=$(need 1)
[ "$n1" -lt "$n0" ] || fail "ZeRO 1 needs $n1 bytes, not less than ZeRO 0's $n0"
expect 1 tight "$CFG" --world 2 "${tiny[@]}" --memory-per-device $(((n0 + n1) / 2))
tail -1 "$WORK/tight.out" | grep -Eq '^does not fit: .*cheapest change that fits: ZeRO stage 1, .* --set zero_optimization.stage=1$' ||
  fail "tight: last line is '$(tail -1 "$WORK/tight.out")'"
expect 1 tiny "$CFG" "${tiny[@]}" --memory-per-device 1MiB
tail -1 "$WORK/tiny.out" | grep -q 'use more ranks' || fail "tiny: $(tail -1 "$WORK/tiny.out")"
# Bad input: one line on stderr, exit 2.
expect 2 missing "$SRC/configs/no-such.yaml"
expect 2 badsize "$CFG" --memory-per-device 12parsecs
expect 2 badworld "$CFG" --set parallel.tensor_model_parallel_size=2
grep -q -- '--world' "$WORK/badworld.err" || fail "badworld: no hint of --world"
expect 2 badkey "$CFG" --set model.hidden_size=abc
expect 2 noconfig
for n in missing badsize badworld badkey noconfig; do
  [ "$(wc -l < "$WORK/$n.err")" -eq 1 ] || { cat "$WORK/$n.err"; fail "$n: not one line on stderr"; }
  [ ! -s "$WORK/$n.out" ] || fail "$n: wrote to stdout"
done
echo PASS
