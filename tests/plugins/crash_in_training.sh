#!/usr/bin/env bash
# A plugin that crashes during a one-process run: one line names the signal and points at the
# harness, and the run ends as the signal's default action ends it (134 for SIGABRT).
#   crash_in_training.sh TRIAD_LAUNCH CONFIG TEST_PLUGIN_DIR WORK_DIR
set -u
launch=$1 config=$2 plugins=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
TRIAD_PLUGIN_PATH=$plugins "$launch" "$config" --quiet --set "attention={name: buggy, bug: abort}" \
  --set training.train_iters=2 --set output.dir="$work/run" >"$work/out.log" 2>"$work/err.log"
rc=$?
fail() { echo "FAIL: $*"; cat "$work/out.log" "$work/err.log"; exit 1; }
[[ $rc == 134 ]] || fail "exit $rc, expected 134 (SIGABRT)"
grep -q "triad-launch: error: the run crashed with SIGABRT (in the engine or a plugin; \`triad-plugin-test KIND FILE\` checks a plugin)" "$work/err.log" ||
  fail "no crash line"
echo "PASS: a crash in a one-process run is one line, exit 134"
