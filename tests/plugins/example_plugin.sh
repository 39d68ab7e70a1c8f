#!/usr/bin/env bash
# Out-of-tree plugin workflow, end to end:
#   install Triad to a fresh prefix -> build examples/attention-example against it with
#   find_package(Triad) -> the installed triad-plugin-test passes it -> triad-info lists it.
# Usage: example_plugin.sh CMAKE BUILD_DIR EXAMPLE_SRC WORK_DIR GENERATOR CXX_COMPILER
set -euo pipefail
cmake=$1 build=$2 src=$3 work=$4 gen=$5 cxx=$6
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

step() { echo "== $*"; }
step "install $build -> $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log"; exit 1; }

step "configure + build the example against the installed SDK"
"$cmake" -S "$src" -B "$work/build" -G "$gen" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
"$cmake" --build "$work/build"
so=$work/build/libtriad-attention-example.so
[[ -f $so ]] || { echo "expected $so to be built"; exit 1; }

step "installed triad-plugin-test on the example"
"$prefix/bin/triad-plugin-test" attention "$so" | tee "$work/suite.log"
tail -n 1 "$work/suite.log" | grep -Eq '^[0-9]+ passed, 0 failed, [0-9]+ skipped$'

step "installed triad-info finds it through TRIAD_PLUGIN_PATH, with its parameter"
TRIAD_PLUGIN_PATH=$work/build "$prefix/bin/triad-info" --kind attention | tee "$work/info.log"
grep -q '^attention example$' "$work/info.log"
grep -q 'block_k' "$work/info.log"
grep -q '^  abi:          plugin 1, attention 1$' "$work/info.log"
echo "example plugin: OK"
