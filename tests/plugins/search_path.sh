#!/usr/bin/env bash
# The plugin search path, with real executables: the build tree's triad-info / triad-schedule and
# copies of them "installed" in a temporary prefix outside the build tree.
#   - an installed executable never searches the build tree it was built in;
#   - TRIAD_PLUGIN_PATH comes first, before the installation's folder and the build tree's;
#   - a plugin found twice is one error line naming both files and the fix (exit 2), unless
#     TRIAD_PLUGIN_OVERRIDE=1, which picks the first with a one-line notice naming both;
#   - a file named for another plugin than its descriptor declares is refused, and "did you mean"
#     lists plugins by their descriptors' names;
#   - triad-info exits 1 when a plugin is broken, and prints the plugins' log lines after the
#     listing.
# Usage: search_path.sh BIN_DIR GPIPE_PLUGIN TEST_PLUGIN_DIR BAD_PLUGIN_DIR
set -uo pipefail
bin=$1 gpipe=$2 test_plugins=$3 bad_plugins=$4
build_plugins=$(dirname "$gpipe")
work=$(mktemp -d "${TMPDIR:-/tmp}/triad-search-path.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run NAME WANT_RC CMD...: runs CMD with stdout in $work/NAME.out and stderr in $work/NAME.err.
run() {
  local name=$1 want=$2
  shift 2
  "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  echo "== $name: exit $rc"
  [[ $rc == "$want" ]] || { fail "$name: exit $rc, expected $want"; cat "$work/$name.out" "$work/$name.err"; }
}
has() {  # has NAME STREAM TEXT: the stream (out or err) contains TEXT
  grep -qF -- "$3" "$work/$1.$2" || { fail "$1: $2 lacks '$3'"; cat "$work/$1.$2"; }
}
lacks() {
  ! grep -qF -- "$3" "$work/$1.$2" || { fail "$1: $2 has '$3'"; cat "$work/$1.$2"; }
}
one_line() {
  [[ $(wc -l <"$work/$1.$2") == 1 ]] || { fail "$1: $2 is not one line"; cat "$work/$1.$2"; }
}

prefix=$work/prefix
mkdir -p "$prefix/bin" "$prefix/lib/triad" "$work/env"
cp "$bin/triad-info" "$bin/triad-schedule" "$prefix/bin/"
schedule=(--stages 2 --micro-batches 2 --schedule)
unset TRIAD_PLUGIN_PATH TRIAD_PLUGIN_OVERRIDE

# The build tree's executables see the build's plugins, said to come from the build tree.
run build_info 0 "$bin/triad-info" --kind pipeline
has build_info out "origin:       build tree ($build_plugins)"
# A data plugin's parameters go under data_parallel: (data: is the dataset's section).
run build_info_data 0 "$bin/triad-info" --kind data
has build_info_data out "(YAML: data_parallel: {name: zero,"
lacks build_info_data out "(YAML: data: "

# Installed with no plugins: the build's gpipe is not found, nor is the build folder searched.
run installed_empty 0 "$prefix/bin/triad-info"
has installed_empty out "  $prefix/lib/triad  (install)"
has installed_empty out "no plugins found"
lacks installed_empty out "$build_plugins"
run installed_no_gpipe 2 "$prefix/bin/triad-schedule" "${schedule[@]}" gpipe
has installed_no_gpipe err "no pipeline plugin named 'gpipe'"
lacks installed_no_gpipe err "$build_plugins"

# Installed with its own gpipe: found there.
cp "$gpipe" "$prefix/lib/triad/"
run installed 0 "$prefix/bin/triad-info" --kind pipeline
has installed out "file:         $prefix/lib/triad/libtriad-pipeline-gpipe.so"
has installed out "origin:       install ($prefix/lib/triad)"
run installed_gpipe 0 "$prefix/bin/triad-schedule" "${schedule[@]}" gpipe

# A second gpipe in TRIAD_PLUGIN_PATH: one error line naming both files and the fix ...
cp "$gpipe" "$work/env/"
export TRIAD_PLUGIN_PATH=$work/env
run shadowed 2 "$prefix/bin/triad-schedule" "${schedule[@]}" gpipe
one_line shadowed err
has shadowed err "pipeline plugin 'gpipe' is found twice on the plugin search path: $work/env/libtriad-pipeline-gpipe.so (TRIAD_PLUGIN_PATH) and $prefix/lib/triad/libtriad-pipeline-gpipe.so (install)"
has shadowed err "remove one of them, or set TRIAD_PLUGIN_OVERRIDE=1"
run shadowed_info 1 "$prefix/bin/triad-info" --kind pipeline
has shadowed_info out "BROKEN $prefix/lib/triad/libtriad-pipeline-gpipe.so"
has shadowed_info out "origin:       TRIAD_PLUGIN_PATH ($work/env)"
# ... the same against the build tree, from the build tree's executable ...
run shadowed_build 2 "$bin/triad-schedule" "${schedule[@]}" gpipe
has shadowed_build err "$work/env/libtriad-pipeline-gpipe.so (TRIAD_PLUGIN_PATH) and $build_plugins/libtriad-pipeline-gpipe.so (build tree)"
# ... and with TRIAD_PLUGIN_OVERRIDE=1 the first wins, with a notice naming both.
run override 0 env TRIAD_PLUGIN_OVERRIDE=1 "$prefix/bin/triad-schedule" "${schedule[@]}" gpipe
one_line override err
has override err "triad: notice: pipeline plugin 'gpipe': using $work/env/libtriad-pipeline-gpipe.so (TRIAD_PLUGIN_PATH), which shadows $prefix/lib/triad/libtriad-pipeline-gpipe.so (install)"
has override out "bubble:"
run override_info 0 env TRIAD_PLUGIN_OVERRIDE=1 "$prefix/bin/triad-info" --kind pipeline
has override_info out "SHADOWED $prefix/lib/triad/libtriad-pipeline-gpipe.so"
# The first is TRIAD_PLUGIN_PATH's: a file there that is no library is what fails to load.
echo "not a library" >"$work/env/libtriad-pipeline-gpipe.so"
run override_first 2 env TRIAD_PLUGIN_OVERRIDE=1 "$prefix/bin/triad-schedule" "${schedule[@]}" gpipe
has override_first err "cannot load plugin $work/env/libtriad-pipeline-gpipe.so"
run override_first_build 2 env TRIAD_PLUGIN_OVERRIDE=1 "$bin/triad-schedule" "${schedule[@]}" gpipe
has override_first_build err "cannot load plugin $work/env/libtriad-pipeline-gpipe.so"

# A file named for another plugin than its descriptor: refused, naming both names and the fix.
rm "$work/env/libtriad-pipeline-gpipe.so" "$prefix/lib/triad/libtriad-pipeline-gpipe.so"
cp "$gpipe" "$work/env/libtriad-pipeline-mine.so"
run misnamed 2 "$prefix/bin/triad-schedule" "${schedule[@]}" mine
one_line misnamed err
has misnamed err "$work/env/libtriad-pipeline-mine.so: descriptor data does not match filename: it declares kind 'pipeline' and name 'gpipe', the file name says kind 'pipeline' and name 'mine'"
has misnamed err "rename the file to libtriad-pipeline-gpipe.so, or change the descriptor"
# Asked for by its descriptor's name: not found, the misnamed file pointed at, and "mine" (a file
# name no descriptor declares) never offered.
run misnamed_by_descriptor 2 "$prefix/bin/triad-schedule" "${schedule[@]}" gpipe
one_line misnamed_by_descriptor err
has misnamed_by_descriptor err "$work/env/libtriad-pipeline-mine.so declares pipeline plugin 'gpipe' but its file name says 'mine': rename the file to libtriad-pipeline-gpipe.so"
has misnamed_by_descriptor err "no pipeline plugins were found there"
run misnamed_near 2 "$prefix/bin/triad-schedule" "${schedule[@]}" min
lacks misnamed_near err "did you mean"
unset TRIAD_PLUGIN_PATH

# triad-info: exit 1 with broken plugins, every plugin still listed, and the log lines of the
# plugins (chatty logs when created and when asked for its capabilities) after the listing.
export TRIAD_PLUGIN_PATH=$test_plugins:$bad_plugins
run info_broken 1 "$prefix/bin/triad-info" --kind attention
has info_broken out "attention chatty"
has info_broken out "attention buggy"
has info_broken out "BROKEN $bad_plugins/libtriad-attention-abi99.so"
cat "$work/info_broken.err" >>"$work/info_broken.out"  # wherever the logger writes
first_log=$(grep -n '\[chatty\]' "$work/info_broken.out" | head -n 1 | cut -d: -f1)
logs=$(grep -c '\[chatty\]' "$work/info_broken.out")
last_listed=$(grep -n -E '^(attention |BROKEN |  )' "$work/info_broken.out" | tail -n 1 | cut -d: -f1)
if [[ -z $first_log || $logs -lt 2 ]]; then
  fail "info_broken: chatty's two log lines are missing"
  cat "$work/info_broken.out"
elif ((first_log <= last_listed)); then
  fail "info_broken: a plugin's log line (line $first_log) comes before the end of the listing (line $last_listed)"
  cat "$work/info_broken.out"
fi
has info_broken out "chatty plugin created"
has info_broken out "chatty plugin asked for its capabilities"
unset TRIAD_PLUGIN_PATH

((fails == 0)) && echo "search path: OK" || echo "search path: $fails failure(s)"
((fails == 0))
