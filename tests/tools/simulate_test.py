"""triad-simulate end to end: calibrate this machine on configs/gpt-tiny.yaml (two micro-batch
sizes, naive and flash2, two rounds pooled), then predict with the description it wrote: one
layout's report, a --grid over ranks, ZeRO stage and pipeline stages as a table, fastest
first, and as JSON whose breakdown adds up to each step; a refused layout is a row, not the end of the grid. The shipped
datasheet descriptions load and predict the published layouts (configs/published/). Bad input to
calibrate is one line and exit 2. No time is asserted: the machine is shared.
    simulate_test.py BIN_DIR SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, check_bad_input, finish, run, scratch  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
SIM = os.path.join(BIN, "triad-simulate")
CONFIG = os.path.join(SRC, "configs", "gpt-tiny.yaml")
d = scratch("triad-simulate-test-")
machine = os.path.join(d, "machine.yaml")

rc, out, err = run([SIM, "calibrate", "--out", machine, "--config", CONFIG,
                    "--micro-batches", "2,8", "--attention", "naive,flash2", "--rounds", "2"], d)
check(rc == 0, f"calibrate exits 0 (got {rc}: {err.strip()[-300:]})")
check(os.path.isfile(machine) and "wrote" in out, "calibrate wrote the description")
text = open(machine).read() if os.path.isfile(machine) else ""
for key in ("peak_tflops", "efficiency", "flash2", "memory_bandwidth_gbs", "all_reduce",
            "per_step_ms", "calibrated on", "medians over 2 rounds"):
    check(key in text, f"the description holds {key}")

rc, out, err = run([SIM, CONFIG, "--machine", machine], d)
check(rc == 0 and "step:" in out and "where the step goes" in out,
      f"one layout's report (rc {rc}: {err.strip()})")

# A plugin the description has not measured is priced on the GEMM curve, and said so.
rc, out, err = run([SIM, CONFIG, "--machine", machine, "--set", "attention=flash1"], d)
check(rc == 0 and "no measurements of attention plugin 'flash1'" in err,
      f"an unmeasured attention plugin is noted (rc {rc}: {err.strip()})")
rc, out, err = run([SIM, CONFIG, "--machine", machine, "--set", "attention=flash2"], d)
check(rc == 0 and "no measurements" not in err, f"a measured one is not (rc {rc}: {err.strip()})")

grid = ["--world", "2", "--grid", "zero_optimization.stage=0,3",
        "--grid", "parallel.pipeline_model_parallel_size=1,2,3"]
rc, out, err = run([SIM, CONFIG, "--machine", machine] + grid, d)
check(rc == 0, f"the grid exits 0 (rc {rc}: {err.strip()})")
rows = [l for l in out.splitlines() if l[:4].strip().isdigit()]
check(len(rows) == 6, f"the grid has 6 rows (got {len(rows)})")
check(sum("refused" in r for r in rows) == 2 and all("refused" in r for r in rows[-2:]),
      "pp 3 on 2 ranks is refused in its rows, listed last")

png = os.path.join(d, "grid.png")
rc, out, err = run([SIM, CONFIG, "--machine", machine, "--png", png] + grid, d)
check(rc == 0 and os.path.getsize(png) > 1000 if os.path.exists(png) else False,
      f"--png draws the grid (rc {rc}: {err.strip()})")

rc, out, err = run([SIM, CONFIG, "--machine", machine, "--json"] + grid, d)
doc = json.loads(out) if rc == 0 else {}

# The picture is not replaced unless asked: triad-simulate keeps it, and replaces it with
# --overwrite; plot_simulate.py replaces it when the tool passes --overwrite, and --keep names
# that flag.
rc2, out2, err2 = run([SIM, CONFIG, "--machine", machine, "--png", png] + grid, d)
check_bad_input("triad-simulate", rc2, err2, [png, "already exists", "--overwrite"],
                "--png over a picture")
rc2, out2, err2 = run([SIM, CONFIG, "--machine", machine, "--png", png, "--overwrite"] + grid, d)
check(rc2 == 0, f"--png with --overwrite replaces the picture (rc {rc2}: {err2.strip()})")
plot = os.path.join(SRC, "tools", "plot_simulate.py")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # as the tool
with open(os.path.join(d, "grid.json"), "w") as f:
    f.write(out)
rc2, out2, err2 = run([PY, plot, "grid.json", png, "--keep"], d)
check_bad_input("triad-simulate", rc2, err2, [png, "already exists", "--overwrite"],
                "plot_simulate.py --keep over a picture")
with open(png, "wb") as f:
    f.write(b"not a picture")
rc2, out2, err2 = run([PY, plot, "grid.json", png, "--overwrite"], d)
check(rc2 == 0 and open(png, "rb").read(4) == b"\x89PNG",
      f"plot_simulate.py --overwrite replaces it ({err2.strip()})")
ok = [x for x in doc.get("layouts", []) if "refused" not in x]
check(len(ok) == 4, f"JSON: 4 predicted layouts (got {len(ok)})")
for x in ok:
    parts = sum(x["breakdown_ms"].values())
    check(abs(parts - x["ms_per_step"]) <= 1e-6 * x["ms_per_step"],
          f"{x['layout']}: the breakdown adds up to the step ({parts:.4f} vs {x['ms_per_step']:.4f})")
    check(x["samples_per_s"] > 0 and x["memory_per_rank_bytes"] > 0, f"{x['layout']}: rates")
# ZeRO-3 moves more than ZeRO-0 (it gathers the weights too): on a datasheet description, whose
# collectives are fixed (a calibration's are measured, and on a busy machine an all-reduce may
# measure slower than the reduce-scatter and all-gathers it stands against).
rc, out, err = run([SIM, CONFIG, "--machine", os.path.join(SRC, "configs", "machines",
                                                           "h100-80gb-dgx.yaml"), "--json"] + grid, d)
sheet = [x for x in (json.loads(out)["layouts"] if rc == 0 else []) if "refused" not in x]
dp = {x["layout"]: x["breakdown_ms"]["data_parallel"] for x in sheet}
check(dp.get("zero_optimization.stage=3,parallel.pipeline_model_parallel_size=1", 0) >
      dp.get("zero_optimization.stage=0,parallel.pipeline_model_parallel_size=1", 0) > 0,
      f"ZeRO-3's data-parallel time exceeds ZeRO-0's at dp 2 (it gathers the weights too): {dp}")

for name, nodes in (("bloom-176b", 48), ("megatron-gpt-175b", 8)):
    cfg = os.path.join(SRC, "configs", "published", name + ".yaml")
    rc, out, err = run([SIM, cfg, "--machine",
                        os.path.join(SRC, "configs", "machines", "a100-80gb-dgx.yaml"),
                        "--nodes", str(nodes), "--json"], d)
    x = json.loads(out)["layouts"][0] if rc == 0 else {}
    check(rc == 0 and 50 < x.get("tflops_per_device", 0) < 312,
          f"{name} on {nodes} DGX A100 nodes: a TFLOP/s between 50 and the peak "
          f"({x.get('tflops_per_device')}; {err.strip()})")


def predict(name, machine, nodes):
    cfg = os.path.join(SRC, "configs", "published", name + ".yaml")
    rc, out, err = run([SIM, cfg, "--machine", os.path.join(SRC, "configs", "machines",
                                                            machine + ".yaml"),
                        "--nodes", str(nodes), "--json"], d)
    return (json.loads(out)["layouts"][0] if rc == 0 else {}), rc, err


# Volta has no bf16: the V100 description gives fp16 and fp32 peaks only, and an fp16 layout is
# costed (and its MFU taken) at the fp16 tensor peak, 125 TFLOP/s.
x, rc, err = predict("megatron-deepspeed-gpt-13b", "v100-32gb-dgx2", 8)
check(rc == 0 and 10 < x.get("tflops_per_device", 0) < 125 and
      abs(x.get("mfu", 0) - x.get("tflops_per_device", 0) / 125) < 1e-9,
      f"GPT-3 13B in fp16 on 8 DGX-2 nodes: MFU against the fp16 peak "
      f"({x.get('tflops_per_device')}, {x.get('mfu')}; {err.strip()})")
# Jean Zay's nodes have a quarter of a DGX A100's bandwidth between nodes: BLOOM's step is longer.
dgx, rc1, _ = predict("bloom-176b", "a100-80gb-dgx", 48)
jz, rc2, err = predict("bloom-176b", "a100-80gb-jean-zay", 48)
check(rc1 == 0 and rc2 == 0 and jz.get("ms_per_step", 0) > dgx.get("ms_per_step", 0) > 0,
      f"BLOOM-176B's step is longer on Jean Zay than on DGX A100 nodes "
      f"({jz.get('ms_per_step')} vs {dgx.get('ms_per_step')} ms; {err.strip()})")

for args, names, what in (
        (["--out", machine], ["exists", "--overwrite"], "an existing --out"),
        (["--out", d], ["is a folder"], "--out a folder"),
        (["--out", os.path.join(d, "x.yaml"), "--micro-batches", "4"], ["at least two sizes"],
         "one micro-batch size"),
        (["--out", os.path.join(d, "x.yaml"), "--config", os.path.join(d, "nope.yaml")],
         ["nope.yaml"], "a missing config"),
        (["--out", os.path.join(d, "x.yaml"), "--rounds", "0"], ["--rounds 0", "1..20"],
         "no rounds"),
        # Found before any measurement (these were found after it, or after the load warning).
        (["--out", "/nonexistent-dir/c.yaml"], ["--out '/nonexistent-dir/c.yaml'",
                                                 "'/nonexistent-dir' does not exist"],
         "--out in a missing folder"),
        (["--out", "/sys/c.yaml"], ["--out '/sys/c.yaml'", "'/sys' is not writable"],
         "--out in a read-only folder"),
        (["--out", os.path.join(d, "x.yaml"), "--attention", "naive,bogus"],
         ["--attention 'bogus'", "no attention plugin named 'bogus'"], "an unknown plugin"),
        (["--out", os.path.join(d, "x.yaml"), "--config", os.path.join(d, "badkey.yaml")],
         ["--config", "badkey.yaml", "unknown key 'model.foo'"], "a config with an unknown key")):
    with open(os.path.join(d, "badkey.yaml"), "w") as f:
        f.write("model: {foo: 1}\n")
    rc, out, err = run([SIM, "calibrate"] + args, d)
    check_bad_input("triad-simulate calibrate", rc, err, names, what)
    check(".tmp-" not in err, f"{what}: no temporary file named")
check(not os.path.exists(os.path.join(d, "x.yaml")), "nothing written by refused calibrations")

# Installed (share/triad, no source tree): the default config is the copy installed beside the
# script; without it, one line naming --config.
share = os.path.join(d, "prefix", "share", "triad")
os.makedirs(share)
for f in ("triad_calibrate.py", "triad_experiments.py"):
    shutil.copy(os.path.join(SRC, "tools", f), share)
calibrate = [PY, os.path.join(share, "triad_calibrate.py"), "--out",
             os.path.join(d, "x.yaml"), "--attention", "bogus"]
env = dict(os.environ, TRIAD_BIN_DIR=BIN)
p = subprocess.run(calibrate, cwd=d, capture_output=True, text=True, env=env)
check_bad_input("triad-simulate calibrate", p.returncode, p.stderr, ["--config is required"],
                "installed without its default config")
os.makedirs(os.path.join(share, "configs"))
shutil.copy(CONFIG, os.path.join(share, "configs"))
p = subprocess.run(calibrate, cwd=d, capture_output=True, text=True, env=env)
check_bad_input("triad-simulate calibrate", p.returncode, p.stderr, ["--attention 'bogus'"],
                "installed: the default config found (the run goes on to check --attention)")
finish("simulate_test", d)
