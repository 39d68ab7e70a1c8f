#!/usr/bin/env bash
# The plugin SDK from an installed Triad, as a stranger uses it. First it runs the commands of
# README.md's "Your own plugin" section, taken from between its sdk-commands markers (so the
# README and this test cannot drift apart; only the `prefix=` line is replaced, by a fresh
# temporary folder), in a scratch folder whose build/, examples/ and configs/ lead to this build
# and this checkout. Those commands install Triad, build each of the five examples/*-example
# against it with find_package(Triad), run the installed triad-plugin-test on each, and train
# through the installed triad-launch with the attention, tensor and pipeline examples (one
# process) and with the transport, data and pipeline examples (pp 2 x dp 2). Then, beyond the
# README, it checks that
#   - the one-process run with the examples gives the losses of the shipped plugins;
#   - the installed triad-info lists every example from the colon-separated TRIAD_PLUGIN_PATH;
#   - find_package(Triad) pointed at the build tree stops with "install first";
#   - the installed triad-info takes the examples from TRIAD_PLUGIN_PATH and the shipped plugins
#     from the installation, never from the build tree;
#   - tp 2 with tensor-example gives the losses of tp 1;
#   - a transport's max_world_size holds: the suite skips larger worlds and the installed
#     triad-launch refuses them in one line, exit 2.
# Usage: install_test.sh CMAKE BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER PYTHON
set -euo pipefail
cmake=$1 build=$2 src=$3 work=$4 gen=$5 cxx=$6 python=$7
rm -rf "$work"
mkdir -p "$work"
cd "$work"
ln -s "$build" build
ln -s "$src/examples" examples
ln -s "$src/configs" configs

# The README's commands use this build's cmake, generator and compiler (and ccache when there
# is one, as the build does), through the variables CMake reads from the environment.
PATH=$(dirname "$cmake"):$PATH
export CMAKE_GENERATOR=$gen CXX=$cxx
if command -v ccache >/dev/null; then export CMAKE_CXX_COMPILER_LAUNCHER=ccache; fi
export OMP_NUM_THREADS=1
unset TRIAD_PLUGIN_PATH

step() { echo "== $*"; }
fail() {
  echo "FAIL: $*"
  exit 1
}

step "the commands of README.md's sdk-commands block"
awk '/<!-- sdk-commands -->/ {on = 1; next} /<!-- \/sdk-commands -->/ {on = 0} on' \
  "$src/README.md" | grep -v '^```' >readme.sh
grep -q '^prefix=' readme.sh || fail "README.md's sdk-commands block does not start with prefix="
grep -q 'triad-plugin-test' readme.sh || fail "README.md's sdk-commands block runs no triad-plugin-test"
prefix=$work/prefix
sed -i "s|^prefix=.*|prefix=$prefix|" readme.sh
cat readme.sh
(
  set -x
  source ./readme.sh
) >readme.log 2>&1 || {
  cat readme.log
  fail "a command of README.md's sdk-commands block failed (readme.log above)"
}
grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$|done: ' readme.log || true
for kind in attention transport data tensor pipeline; do
  [[ -f build-examples/$kind/libtriad-$kind-example.so ]] ||
    fail "the README's commands built no build-examples/$kind/libtriad-$kind-example.so"
done
# The 4-process run went through the transport example, which logs what it carried.
grep -Eq 'transport: example' readme.log || fail "the README's 4-process run did not use transport 'example'"
grep -Eq 'through ucx: .*all_reduce [1-9]' readme.log ||
  fail "the transport example logged no all-reduce through ucx"

# same_losses A B TOLERANCE: the first 3 steps' losses of runs A and B within TOLERANCE relative.
same_losses() {
  "$python" - "$1" "$2" "$3" <<'EOF'
import json, sys
def losses(folder):
    out = {}
    for line in open(folder + "/metrics.jsonl"):
        r = json.loads(line)
        if "loss" in r and "step" in r:
            out[r["step"]] = r["loss"]
    return out
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
for step in (1, 2, 3):
    if step not in a or step not in b:
        sys.exit(f"step {step} missing: {sys.argv[1]} {sorted(a)}, {sys.argv[2]} {sorted(b)}")
    rel = abs(a[step] - b[step]) / abs(b[step])
    print(f"step {step}: {a[step]:.6f} vs {b[step]:.6f} (relative {rel:.1e})")
    if rel > tol:
        sys.exit(f"step {step}: {sys.argv[1]} {a[step]} vs {sys.argv[2]} {b[step]} differ by {rel:.1e} > {tol}")
EOF
}
launch() { "$prefix/bin/triad-launch" "$@"; }
run_dir=runs/sdk-examples  # the README's one-process run
[[ -f $run_dir/metrics.jsonl ]] || fail "the README's one-process run wrote no $run_dir/metrics.jsonl"

step "the shipped plugins, for reference (one process, 3 steps)"
launch configs/gpt-tiny.yaml --set training.train_iters=3 --set output.dir=runs/shipped >shipped.log 2>&1 ||
  { cat shipped.log; fail "the reference run with the shipped plugins failed"; }
step "the examples give the shipped plugins' losses"
same_losses "$run_dir" runs/shipped 1e-5 || fail "the examples' losses differ from the shipped plugins'"

step "the installed triad-info lists each example from a colon-separated TRIAD_PLUGIN_PATH"
path=""
for kind in attention transport data tensor pipeline; do path+=${path:+:}$work/build-examples/$kind; done
TRIAD_PLUGIN_PATH=$path "$prefix/bin/triad-info" >info.log
for kind in attention transport data tensor pipeline; do
  grep -q "^$kind example$" info.log || { cat info.log; fail "triad-info does not list $kind example"; }
done
grep -q 'block_k' info.log || fail "triad-info does not show the attention example's block_k"
grep -q '^  abi:          plugin 1, attention 1$' info.log || fail "triad-info shows no attention ABI"
# The installed tools search their own prefix, never the build tree they were built in.
grep -q "^  origin:       TRIAD_PLUGIN_PATH ($work/build-examples/tensor)" info.log ||
  { cat info.log; fail "triad-info does not say the tensor example came from TRIAD_PLUGIN_PATH"; }
grep -q "^  origin:       install ($prefix/lib/triad)" info.log ||
  { cat info.log; fail "triad-info shows no shipped plugin from the installation's lib/triad"; }
if grep -q "origin: *build tree" info.log; then
  cat info.log
  fail "the installed triad-info loads plugins from the build tree"
fi

step "find_package(Triad) pointed at the build tree says to install first"
if cmake -S examples/pipeline-example -B from-build-tree -DCMAKE_PREFIX_PATH="$build" \
  >from-build-tree.log 2>&1; then
  fail "configuring against the build tree succeeded"
fi
# (CMake wraps the message and doubles the space after a full stop.)
tr -s ' \n' ' ' <from-build-tree.log |
  grep -q "is Triad's build tree, not an installed Triad. Install it first" ||
  { cat from-build-tree.log; fail "configuring against the build tree did not say to install first"; }

step "without CMake: pkg-config --cflags triad builds the attention example, which passes"
if command -v pkg-config >/dev/null; then
  cflags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags triad) ||
    fail "pkg-config finds no triad in $prefix/lib/pkgconfig"
  mkdir -p by-pkg-config
  # shellcheck disable=SC2086  # the flags are words
  c++ -std=c++17 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -fno-gnu-unique -Wl,-z,defs $cflags \
    examples/attention-example/*.cpp -o by-pkg-config/libtriad-attention-example.so ||
    fail "the attention example does not build with pkg-config's flags"
  "$prefix/bin/triad-plugin-test" --quick attention by-pkg-config/libtriad-attention-example.so \
    >pkg-config.log 2>&1 || { cat pkg-config.log; fail "the pkg-config build fails the harness"; }
else
  echo "(pkg-config is not installed: skipped)"
fi

# tensor-example at tp 2 (attention replicated, MLP split) against the one-process losses of the
# shipped plugins: a third party's own split, run by the core.
step "tp 2 with tensor-example gives the losses of tp 1"
TRIAD_PLUGIN_PATH=$work/build-examples/tensor launch --nproc-per-node 2 configs/gpt-tiny.yaml \
  --set tensor=example --set parallel.tensor_model_parallel_size=2 --set training.train_iters=3 \
  --set output.dir=runs/tp2-example >tp2.log 2>&1 || { cat tp2.log; fail "tp 2 with tensor-example failed"; }
same_losses runs/tp2-example runs/shipped 1e-5 || fail "tp 2 with tensor-example moved the losses"
step "transport-example with max_ranks=2: the suite skips worlds 3 and 4, the launcher refuses 4 ranks"
"$prefix/bin/triad-plugin-test" --quick transport build-examples/transport/libtriad-transport-example.so \
  --param max_ranks=2 >max_ranks.log 2>&1 || { cat max_ranks.log; fail "the suite with max_ranks=2 failed"; }
for n in 3 4; do
  grep -q "^SKIP example n=$n: the plugin runs worlds of up to 2 ranks (max_world_size)" max_ranks.log ||
    { cat max_ranks.log; fail "the suite did not skip world $n beyond max_world_size 2"; }
done
rc=0
TRIAD_PLUGIN_PATH=$work/build-examples/transport launch --nproc-per-node 4 configs/gpt-tiny.yaml \
  --set transport=example --set transport.max_ranks=2 --set training.train_iters=1 \
  --set output.dir=runs/max-ranks >max_ranks_launch.log 2>&1 || rc=$?
[[ $rc == 2 ]] || { cat max_ranks_launch.log; fail "4 ranks over max_ranks=2 exited $rc, not 2"; }
grep -q "runs worlds of up to 2 ranks (its max_world_size) and this world has 4" max_ranks_launch.log ||
  { cat max_ranks_launch.log; fail "no one-line refusal of a world beyond max_world_size"; }
echo "sdk install test: OK"
