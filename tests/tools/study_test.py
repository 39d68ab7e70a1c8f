"""triad-study end to end: a 2 x 2 grid (world 1, 2 x ZeRO stage 0, 1), 2 repeats, 1 warm-up +
2 measured steps. Checks that the CSV, JSON and PNG are written and that every mean and σ of the
mean equals what this test computes itself from the runs' metrics.jsonl; that a rerun skips
finished runs and reruns only a damaged one; that a refused combination and a run refused for
memory are recorded and not fatal; that a different study is not written over the folder
without --overwrite; and that bad input is one line and exit 2.
    study_test.py BIN_DIR
"""
import csv
import json
import math
import os
import statistics
import struct
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, check_bad_input, finish, run, scratch  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
STUDY = os.path.join(BIN, "triad-study")
METRICS = ["samples_per_s", "tokens_per_s", "tflops_per_device", "ms_per_step"]
WARMUP, STEPS, REPEATS = 1, 2, 2

d = scratch("triad-study-test-")
with open(os.path.join(d, "grid.yaml"), "w") as f:
    f.write(f"""config: tiny.yaml
grid:
  world: [1, 2]
  zero_optimization.stage: [0, 1]
repeats: {REPEATS}
warmup_steps: {WARMUP}
steps: {STEPS}
output: out
""")
rc, out, err = run([STUDY, "grid.yaml"], d)
check(rc == 0, f"the study exits 0 (got {rc}: {err.strip()[-300:]})")
progress = [l for l in out.splitlines() if l.startswith("[")]
check(len(progress) == 8, f"one progress line per run: 8 (got {len(progress)})")
check(all("ETA" in l for l in progress[:-1]), "each progress line but the last has an ETA")

res = os.path.join(d, "out")
rows = list(csv.DictReader(open(os.path.join(res, "results.csv"))))
check(len(rows) == 4, f"results.csv has 4 experiments (got {len(rows)})")
check(all(r["status"] == "ok" and r["repeats_ok"] == "2" for r in rows),
      "every experiment ok with 2 repeats")
vals = [float(r["samples_per_s_mean"]) for r in rows]
check(vals == sorted(vals, reverse=True), "results.csv is sorted best first (samples/s)")
j = json.load(open(os.path.join(res, "results.json")))
by_name = {e["name"]: e for e in j["experiments"]}


def run_values(folder):
    """This test's own reading of one run: mean of each metric over the measured steps."""
    recs = [json.loads(l) for l in open(os.path.join(folder, "run", "metrics.jsonl"))]
    check(len(recs) == WARMUP + STEPS, f"{folder}: {WARMUP + STEPS} steps in metrics.jsonl")
    measured = [r for r in recs if r["step"] > WARMUP]
    v = {k: sum(r[k] for r in measured) / len(measured) for k in METRICS}
    v["peak_memory_bytes"] = max(r["peak_memory_bytes"] for r in recs)
    return v


for r in rows:
    name = r["name"]
    world, stage = name.split(",")
    folder = os.path.join(res, "experiments",
                          f"{world.replace('=', '-')}__{stage.replace('=', '-')}")
    runs = [run_values(os.path.join(folder, f"repeat-{i}")) for i in range(REPEATS)]
    for k in METRICS + ["peak_memory_bytes"]:
        xs = [v[k] for v in runs]
        mean = statistics.fmean(xs)
        sem = statistics.stdev(xs) / math.sqrt(len(xs))
        got_m, got_s = float(r[f"{k}_mean"]), float(r[f"{k}_sem"])
        ok = math.isclose(got_m, mean, rel_tol=1e-9) and math.isclose(got_s, sem, rel_tol=1e-9,
                                                                      abs_tol=1e-12)
        check(ok, f"{name} {k}: CSV {got_m:.6g} ± {got_s:.3g} = computed {mean:.6g} ± {sem:.3g}")
        e = by_name[name]
        check(math.isclose(e["mean"][k], mean, rel_tol=1e-9) and
              math.isclose(e["sem"][k], sem, rel_tol=1e-9, abs_tol=1e-12),
              f"{name} {k}: JSON agrees")
    check(by_name[name]["world"] == int(world.split("=")[1]), f"{name}: JSON records the world")
    # The median (what --predict compares with) is over every measured step of every repeat.
    steps = [json.loads(l) for i in range(REPEATS)
             for l in open(os.path.join(folder, f"repeat-{i}", "run", "metrics.jsonl"))]
    for k in METRICS:
        med = statistics.median(x[k] for x in steps if x["step"] > WARMUP)
        check(math.isclose(float(r[f"{k}_median"]), med, rel_tol=1e-9) and
              math.isclose(by_name[name]["median"][k], med, rel_tol=1e-9),
              f"{name} {k}: median over {REPEATS} x {STEPS} steps {med:.6g} in CSV and JSON")

env = j["environment"]
check(env["cpus"] and env["triad"]["commit"] and "libopenblas0-openmp" in str(env["libraries"])
      or "yaml" in env["libraries"], "the environment records CPUs, the commit and libraries")
check(len(env["triad"]["commit"]) == 40, f"the Triad commit is recorded ({env['triad']['commit']!r})")


def png_size(path):
    data = open(path, "rb").read(32)
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", data[16:24])


size = png_size(os.path.join(res, "chart.png"))
check(size is not None and size[0] > 300 and size[1] > 100, f"chart.png is a PNG ({size})")
check(j["charts"][0] == "chart.png", "results.json names the chart")

# Resume: nothing reruns; then one repeat's result damaged -> only it reruns.
stamp = os.path.getmtime(os.path.join(res, "experiments", "world-2__zero_optimization.stage-1",
                                      "repeat-0", "result.json"))
rc, out, err = run([STUDY, "grid.yaml"], d)
check(rc == 0 and "8 runs already finished" in out, "a rerun reports 8 finished runs")
check(not any(l.startswith("[") for l in out.splitlines()), "a rerun launches nothing")
check(os.path.getmtime(os.path.join(res, "experiments", "world-2__zero_optimization.stage-1",
                                    "repeat-0", "result.json")) == stamp,
      "a rerun leaves finished results alone")
# A damaged result.json (not an object: it was an AttributeError) is an unfinished run.
with open(os.path.join(res, "experiments", "world-1__zero_optimization.stage-0", "repeat-1",
                       "result.json"), "w") as f:
    f.write("[1]\n")
rc, out, err = run([STUDY, "grid.yaml"], d)
progress = [l for l in out.splitlines() if l.startswith("[")]
check(rc == 0 and len(progress) == 1 and "world=1,zero_optimization.stage=0 repeat 2/2" in
      progress[0], f"after one result is damaged only that run reruns ({progress}; {err})")

# A combination the launcher refuses (tp 2 on 1 rank) is recorded; the rest runs. (A value
# refused in every combination is bad input instead: below.) Its output goes where the grid
# study's is: refused without --overwrite (nothing touched), replacing it with.
with open(os.path.join(d, "refused.yaml"), "w") as f:
    f.write("config: tiny.yaml\ngrid: {world: [1, 2], parallel.tensor_model_parallel_size: [1, 2]}\n"
            "repeats: 1\nsteps: 1\noutput: out-refused\n")
rc, out, err = run([STUDY, "refused.yaml", "--output", "out"], d)
check_bad_input("triad-study", rc, err, ["'out' holds the output of another study",
                                         "--overwrite"], "another study into a study's folder")
check(os.path.exists(os.path.join(res, "experiments", "world-1__zero_optimization.stage-0")),
      "the refused study left the earlier one alone")
rc, out, err = run([STUDY, "refused.yaml", "--output", "out", "--overwrite"], d)
check(rc == 0 and not os.path.exists(os.path.join(res, "experiments",
                                                  "world-1__zero_optimization.stage-0")),
      f"--overwrite replaces the earlier study (exit {rc}: {err.strip()[-200:]})")
os.rename(res, os.path.join(d, "out-refused"))
check(rc == 0, f"a study with a refused combination exits 0 (got {rc}: {err.strip()[-200:]})")
rows = {r["name"]: r for r in csv.DictReader(open(os.path.join(d, "out-refused", "results.csv")))}
bad = rows.get("world=1,parallel.tensor_model_parallel_size=2", {})
check(bad.get("status") == "refused" and "divisible" in bad.get("message", ""),
      f"tp 2 on 1 rank is recorded as refused with the launcher's reason ({bad})")
check(sum(r["status"] == "ok" for r in rows.values()) == 3, "the other 3 combinations ran")
check(list(rows)[-1] == "world=1,parallel.tensor_model_parallel_size=2",
      "the refused experiment is ranked last")

# A run the launcher refuses for memory (a micro-batch of two million) is recorded as oom, with
# the launcher's estimate; the dry run cannot see it, so it is launched and refused there.
with open(os.path.join(d, "oom.yaml"), "w") as f:
    f.write("config: tiny.yaml\ngrid: {training.micro_batch_size: [2, 2000000]}\n"
            "repeats: 1\nsteps: 1\noutput: out-oom\n")
rc, out, err = run([STUDY, "oom.yaml"], d)
check(rc == 0, f"a study with a run refused for memory exits 0 (got {rc})")
rows = {r["name"]: r for r in csv.DictReader(open(os.path.join(d, "out-oom", "results.csv")))}
big = rows.get("training.micro_batch_size=2000000", {})
check(big.get("status") == "oom" and "needs an estimated" in big.get("message", ""),
      f"the two-million micro-batch is recorded as oom with the launcher's estimate ({big})")
check(rows.get("training.micro_batch_size=2", {}).get("status") == "ok", "micro-batch 2 ran")

# Bad input: one line, exit 2, nothing written.
rc, out, err = run([STUDY, "missing.yaml"], d)
check_bad_input("triad-study", rc, err, ["missing.yaml"], "a missing study file")
with open(os.path.join(d, "badkey.yaml"), "w") as f:
    f.write("config: tiny.yaml\ngrid: {zero_optimization.stag: [0, 1]}\noutput: out-badkey\n")
rc, out, err = run([STUDY, "badkey.yaml"], d)
check_bad_input("triad-study", rc, err, ["zero_optimization.stag", "stage"], "an unknown grid key")
with open(os.path.join(d, "badval.yaml"), "w") as f:
    f.write("config: tiny.yaml\ngrid: {world: [1, 2], zero_optimization.stage: [0, 7]}\n"
            "output: out-badval\n")
rc, out, err = run([STUDY, "badval.yaml"], d)
check_bad_input("triad-study", rc, err, ["zero_optimization.stage", "'7'"],
                "a grid value the config rejects")
# A bad key or value in the study's set: section is blamed on set:, not on a grid key.
for name, fixed, says in (("badset", "{foo: 1}", ["set: foo", "unknown key 'foo'"]),
                          ("badsetval", "{zero_optimization.stage: 7}",
                           ["set: zero_optimization.stage", "'7'"])):
    with open(os.path.join(d, name + ".yaml"), "w") as f:
        f.write(f"config: tiny.yaml\nset: {fixed}\ngrid: {{world: [1, 2]}}\n"
                f"output: out-{name}\n")
    rc, out, err = run([STUDY, name + ".yaml"], d)
    check_bad_input("triad-study", rc, err, says, f"a bad set: section ({fixed})")
    check("grid key" not in err and "grid 'world'" not in err,
          f"a bad set: section ({fixed}) is not blamed on the grid")
check(not any(os.path.exists(os.path.join(d, o)) for o in
              ("out-badkey", "out-badval", "out-badset", "out-badsetval")),
      "bad input writes no output folder")

finish("study_test", d)
