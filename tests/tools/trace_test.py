"""The step trace end to end: configs/gpt-tiny.yaml on 2 ranks as pipeline stages (pp 2, two
micro-batches) and as a tensor group (tp 2), with --profile-steps 2-3. Checks that trace.json is
well-formed JSON with both ranks' events; that every block, the embedding and the head have a
forward and a backward span per micro-batch of each traced step; that every span lies inside its
step, spans of one track nest or are apart, and compute + communication waits + other spans add
up to no more than the step; that the waits name their group (pp, tp) and bytes; that
triad-trace's breakdown adds up to the step and it draws its PNG (refusing to overwrite it);
and that a bad --profile-steps value or a bad trace file is one line and exit 2.
    trace_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, check_bad_input, finish, run, scratch  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
LAUNCH = os.path.join(BIN, "triad-launch")
TRACE = os.path.join(BIN, "triad-trace")
CONFIG = os.path.join(SRC, "configs", "gpt-tiny.yaml")
LAYERS, MICRO, STEPS = 4, 2, (2, 3)
EPS = 0.01  # µs: the events' times are doubles of whole nanoseconds

d = scratch("triad-trace-test-")


def launch(name, *sets, profile="2-3"):
    args = [LAUNCH, "--nproc-per-node", "2", CONFIG, "-q", "--profile-steps", profile,
            "--set", "training.train_iters=4", "--set", "training.micro_batch_size=4",
            "--set", f"training.gradient_accumulation_steps={MICRO}",
            "--set", f"output.dir={os.path.join(d, name)}"]
    for s in sets:
        args += ["--set", s]
    return run(args, d)


def spans_within(a, b):
    return a["ts"] >= b["ts"] - EPS and a["ts"] + a["dur"] <= b["ts"] + b["dur"] + EPS


def apart(a, b):
    return a["ts"] + a["dur"] <= b["ts"] + EPS or b["ts"] + b["dur"] <= a["ts"] + EPS


def check_trace(name, layout, group):
    path = os.path.join(d, name, "trace.json")
    if not check(os.path.isfile(path), f"{name}: {path} written"):
        return None
    try:
        doc = json.load(open(path))
    except json.JSONDecodeError as e:
        check(False, f"{name}: trace.json is JSON ({e})")
        return None
    events = doc.get("traceEvents", [])
    xs = [e for e in events if e.get("ph") == "X"]
    check(all(isinstance(e.get(k), (int, float)) for e in xs for k in ("ts", "dur", "pid", "tid")),
          f"{name}: every complete event has numeric ts, dur, pid, tid")
    check(all(e["dur"] >= 0 for e in xs), f"{name}: no negative duration")
    check({e["pid"] for e in xs} == {0, 1}, f"{name}: events of ranks 0 and 1")
    check({e["args"]["name"] for e in events if e.get("name") == "process_name"}
          == {"rank 0", "rank 1"}, f"{name}: a process name per rank")
    check(not [f for f in os.listdir(os.path.join(d, name)) if f.startswith("trace.rank-")],
          f"{name}: the ranks' parts merged and removed")
    for rank in (0, 1):
        mine = [e for e in xs if e["pid"] == rank]
        steps = {e["args"]["step"]: e for e in mine if e["cat"] == "step"}
        check(sorted(steps) == list(STEPS), f"{name} rank {rank}: steps {STEPS} traced "
              f"(got {sorted(steps)})")
        spans = [e for e in mine if e["cat"] != "step"]
        outside = [e["name"] for e in spans if e["args"].get("step") not in steps
                   or not spans_within(e, steps[e["args"]["step"]])]
        check(not outside,
              f"{name} rank {rank}: every span inside its step (outside: {outside[:3]})")
        for s, step in steps.items():
            of = [e for e in spans if e["args"].get("step") == s]
            tangled = [(a["name"], b["name"]) for i, a in enumerate(of) for b in of[i + 1:]
                       if a["tid"] == b["tid"] and not (apart(a, b) or spans_within(a, b)
                                                        or spans_within(b, a))]
            check(not tangled, f"{name} rank {rank} step {s}: spans of one track nest or are "
                  f"apart ({tangled[:2]})")
            compute = [e for e in of if e["cat"] == "compute"]
            rest = [e for e in of if e["cat"] not in ("compute", "communication")]
            check(all(apart(a, b) for a in compute for b in rest),
                  f"{name} rank {rank} step {s}: compute and optimizer/data spans apart")
            top = lambda group_: [e for e in group_ if not any(  # noqa: E731
                o is not e and spans_within(e, o) and not spans_within(o, e) for o in group_)]
            waits = [e for e in of if e["cat"] == "communication"
                     and not any(spans_within(e, o) for o in compute + rest)]
            total = sum(e["dur"] for e in top(compute) + top(waits) + top(rest))
            check(total <= step["dur"] + EPS, f"{name} rank {rank} step {s}: compute + waits + "
                  f"other {total:.1f} µs <= the step {step['dur']:.1f} µs")
    # Every layer's forward and backward per micro-batch of each traced step, on some rank
    # (pipeline stages) or on every rank (tensor parallelism).
    layers = ["embedding", "head"] + [f"block {i}" for i in range(LAYERS)]
    for s in STEPS:
        for mb in range(MICRO):
            for rank in ((0, 1) if layout == "tp" else (None,)):
                names = [e["name"] for e in xs if e["args"].get("step") == s
                         and e["args"].get("mb") == mb and e["cat"] == "compute"
                         and (rank is None or e["pid"] == rank)]
                missing = [f"{p} {l}" for l in layers for p in ("forward", "backward")
                           if names.count(f"{p} {l}") != 1]
                check(not missing, f"{name} step {s} micro-batch {mb}"
                      f"{'' if rank is None else f' rank {rank}'}: one forward and one backward "
                      f"span of every layer (missing or repeated: {missing[:4]})")
    if layout == "pp":
        stage = {0: {"embedding", "block 0", "block 1"}, 1: {"head", "block 2", "block 3"}}
        check(all(e["name"].split(" ", 1)[1] in stage[e["pid"]] for e in xs
                  if e["cat"] == "compute"), f"{name}: each stage's spans are its own layers")
    comm = [e for e in xs if e["cat"] == "communication" and e["args"].get("group") == group]
    check(comm and all(e["args"].get("bytes", 0) > 0 for e in comm),
          f"{name}: waits of the {group} group with their bytes ({len(comm)})")
    check(any(e["cat"] == "optimizer" for e in xs) and any(e["cat"] == "data" for e in xs),
          f"{name}: optimizer and data-loading spans")
    return path


def check_tool(name, path):
    rc, out, err = run([TRACE, path, "--json"], d)
    if not check(rc == 0, f"{name}: triad-trace --json exits 0 (got {rc}: {err.strip()[-300:]})"):
        return
    summary = json.loads(out)
    check(sorted(summary) == ["0", "1"], f"{name}: triad-trace reports both ranks")
    for rank, s in summary.items():
        parts = s["parts_ms"]
        check(s["steps"] == len(STEPS), f"{name} rank {rank}: {len(STEPS)} steps")
        check(all(v >= 0 for v in parts.values()) and parts.get("compute", 0) > 0,
              f"{name} rank {rank}: parts non-negative, compute > 0 ({parts})")
        check(abs(sum(parts.values()) - s["step_ms"]) <= 1e-6 * s["step_ms"] + 1e-6,
              f"{name} rank {rank}: the parts add up to the step ({sum(parts.values()):.4f} vs "
              f"{s['step_ms']:.4f} ms)")
    rc, out, err = run([TRACE, path], d)
    check(rc == 0 and "slowest: rank" in out and "bubble" in out,
          f"{name}: triad-trace prints the breakdown and the slowest rank")
    png = os.path.join(d, name + ".png")
    rc, out, err = run([TRACE, path, "--png", png], d)
    check(rc == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
          f"{name}: --png draws a PNG ({err.strip()[-200:]})")
    rc, out, err = run([TRACE, path, "--png", png], d)
    check_bad_input("triad-trace", rc, err, ["--png", "--overwrite"], f"{name}: --png over a file")
    rc, out, err = run([TRACE, path, "--png", png, "--overwrite"], d)
    check(rc == 0, f"{name}: --png --overwrite replaces it")


for name, layout, sets, group in (
        ("pp", "pp", ["parallel.pipeline_model_parallel_size=2"], "pp"),
        ("tp", "tp", ["parallel.tensor_model_parallel_size=2"], "tp")):
    rc, out, err = launch(name, *sets)
    if check(rc == 0, f"{name}: the run exits 0 (got {rc}: {err.strip()[-400:]})"):
        path = check_trace(name, layout, group)
        if path:
            check_tool(name, path)

# One process, training.profile_dir elsewhere: trace.json there, and not replaced without
# --overwrite.
prof = os.path.join(d, "prof")
solo = [LAUNCH, CONFIG, "-q", "--profile-steps", "1,3", "--set", "training.train_iters=3",
        "--set", "training.micro_batch_size=4", "--set", f"training.profile_dir={prof}"]
rc, out, err = run(solo + ["--set", f"output.dir={os.path.join(d, 'solo')}"], d)
check(rc == 0 and os.path.isfile(os.path.join(prof, "trace.json")),
      f"one process: trace.json in training.profile_dir (exit {rc}: {err.strip()[-300:]})")
if rc == 0:
    steps = [e["args"]["step"] for e in json.load(open(os.path.join(prof, "trace.json")))
             ["traceEvents"] if e.get("cat") == "step"]
    check(steps == [1, 3], f"one process: steps 1 and 3 traced (got {steps})")
rc, out, err = run(solo + ["--set", f"output.dir={os.path.join(d, 'solo2')}"], d)
check_bad_input("triad-launch", rc, err, ["training.profile_dir", "trace.json", "--overwrite"],
                "a profile_dir holding a trace.json")

# Bad --profile-steps: one line naming the key, the value and the fix; nothing run.
for bad, says in (("0-2", "outside"), ("3-9", "outside"), ("x", "not a step number"),
                  ("3-2", "ends before"), ("2,", "not a step number")):
    rc, out, err = launch("bad", "parallel.pipeline_model_parallel_size=2", profile=bad)
    check_bad_input("triad-launch", rc, err, ["training.profile_steps", f"'{bad}'", says,
                                              "--profile-steps 3-4"], f"--profile-steps {bad}")
check(not os.path.exists(os.path.join(d, "bad", "metrics.jsonl")), "a refused run wrote nothing")

# Bad trace files.
with open(os.path.join(d, "broken.json"), "w") as f:
    f.write("{not json")
with open(os.path.join(d, "empty.json"), "w") as f:
    f.write('{"traceEvents": []}')
for file, says in (("broken.json", "not JSON"), ("empty.json", "no traced step"),
                   ("missing.json", "cannot be opened"), (".", "a directory")):
    rc, out, err = run([TRACE, file], d)
    check_bad_input("triad-trace", rc, err, [file, says], f"triad-trace {file}")

# Damaged events: one line naming the file, the first bad event and what is wrong with it (a
# 1e308 start was a TypeError traceback, a negative duration printed negative times).
STEP = {"name": "step 1", "cat": "step", "ph": "X", "ts": 0, "dur": 1000, "pid": 0, "tid": 0,
        "args": {"step": 1}}
SPAN = {"name": "forward block 0", "cat": "compute", "ph": "X", "ts": 10, "dur": 500, "pid": 0,
        "tid": 1, "args": {"step": 1}}


def trace_file(name, *events):
    with open(os.path.join(d, name), "w") as f:
        json.dump({"traceEvents": list(events)}, f)
    return name


for file, bad, says in (
        ("huge-ts.json", {"ts": 1e308}, "ts 1e+308"),
        ("neg-dur.json", {"dur": -50}, "dur -50"),
        ("neg-ts.json", {"ts": -1}, "ts -1"),
        ("nan-dur.json", {"dur": float("nan")}, "dur nan"),
        ("inf-ts.json", {"ts": float("inf")}, "ts inf"),
        ("str-ts.json", {"ts": "10"}, "ts '10'"),
        ("bool-pid.json", {"pid": True}, "pid True"),
        ("neg-pid.json", {"pid": -1}, "pid -1"),
        ("name-num.json", {"name": 7}, "name 7"),
        ("no-dur.json", {"dur": None}, "lacks dur")):
    span = {k: v for k, v in {**SPAN, **bad}.items() if v is not None}
    trace_file(file, STEP, span)
    rc, out, err = run([TRACE, file], d)
    check_bad_input("triad-trace", rc, err, [file, "event 2", says], f"triad-trace {file}")
    check(not out, f"triad-trace {file}: nothing printed before the error")

# --png: a .png name, in a folder that exists and can be written; the line names what the user
# gave (never a temporary file); nothing written.
good = trace_file("good.json", STEP, SPAN)
for png, says in (("x.txt", ["--png 'x.txt'", "does not end in .png", "x.png"]),
                  ("nodir/x.png", ["--png 'nodir/x.png'", "does not exist"]),
                  ("/sys/x.png", ["--png '/sys/x.png'", "'/sys' is not writable"]),
                  (".", ["--png '.' is a folder"])):
    rc, out, err = run([TRACE, good, "--png", png], d)
    check_bad_input("triad-trace", rc, err, says, f"triad-trace --png {png}")
    check(".tmp-" not in err, f"triad-trace --png {png}: no temporary file named")
check(not os.path.exists(os.path.join(d, "x.txt")) and not os.path.exists(os.path.join(d, "nodir")),
      "a refused --png wrote nothing")
rc, out, err = run([TRACE, good, "--png", "good.png"], d)
check(rc == 0 and open(os.path.join(d, "good.png"), "rb").read(4) == b"\x89PNG",
      f"a two-event trace draws its PNG ({err.strip()[-200:]})")

finish("trace_test", d)
