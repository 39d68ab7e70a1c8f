"""triad-autotune end to end on a tiny model on 2 ranks with a small memory limit (6 MiB per
rank), --fast with a patience that lets memory end each doubling: the candidates the memory estimator says cannot fit are never launched (checked
against triad-estimate itself), the summary table has a row per ZeRO stage plus global that
agrees with the experiments, and the best config it writes trains. Then a run of every candidate
of a small space (no --fast) runs exactly the ones that fit, and --confirm reruns the best and
ranks them by their medians. Bad input: one line, exit 2.
    autotune_test.py BIN_DIR
"""
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, check_bad_input, finish, run, scratch  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TUNE = os.path.join(BIN, "triad-autotune")
LIMIT = 6 * 2**20

d = scratch("triad-autotune-test-")
rc, out, err = run([TUNE, "tiny.yaml", "--world", "2", "--fast", "--memory-per-device", "6MiB",
                    "--zero-stages", "0,1", "--tp", "1,2", "--pp", "1",
                    "--attention", "naive,flash2", "--steps", "1", "--output", "tune",
                    # a patience past the doubling's length: memory, not timing noise, ends it
                    "--patience", "8"], d)
print(out)
check(rc == 0, f"autotune exits 0 (got {rc}: {err.strip()[-300:]})")
j = json.load(open(os.path.join(d, "tune", "autotune.json")))
exps = j["experiments"]
launched = [e for e in exps if e["status"] not in ("pruned", "invalid")]
pruned = [e for e in exps if e["status"] == "pruned"]
check(len(launched) >= 3, f"several experiments ran ({len(launched)})")
check(len(pruned) >= 1, f"the memory estimate pruned some candidates ({len(pruned)})")
check(all(e["estimate_bytes"] <= LIMIT for e in launched),
      "every launched experiment's estimate is within the limit")
check(all(e["estimate_bytes"] > LIMIT for e in pruned), "every pruned one's estimate is above it")
check(all(not os.path.exists(os.path.join(d, "tune", "experiments", e["name"])) for e in pruned),
      "no pruned candidate was launched (no folder)")
check(all(os.path.isfile(os.path.join(d, "tune", "experiments", e["name"], "result.json"))
          for e in launched), "every launched experiment has its folder and result")

# The estimator itself, asked about one pruned candidate, says it does not fit (exit 1).
p = pruned[0] if pruned else None
if p:
    cmd = [os.path.join(BIN, "triad-estimate"), "tiny.yaml", "--world", "2",
           "--memory-per-device", "6MiB"]
    for s in p["sets"]:
        cmd += ["--set", s]
    rc2, _, _ = run(cmd, d)
    check(rc2 == 1, f"triad-estimate agrees that {p['name']} does not fit (exit {rc2})")

# The summary table.
table = [l for l in out.splitlines() if l.startswith("|")]
check(bool(table) and re.match(r"\|\s*tuning_space\s*\|\s*num_experiments\s*\|\s*best_metric_val"
                               r"\s*\|\s*best_exp_name\s*\|", table[0]), "the table's header")
rows = {c[0]: c for c in ([x.strip() for x in l.strip("|").split("|")] for l in table[2:])}
check(set(rows) == {"z0", "z1", "global"}, f"rows z0, z1, global ({sorted(rows)})")
ok = [e for e in launched if e["value"] is not None]
best = max(ok, key=lambda e: e["value"])
check(rows.get("global", [""] * 4)[1] == str(len(launched)),
      "global num_experiments = the experiments run")
check(rows.get("global", [""] * 4)[3] == best["name"] == j["best"],
      f"global best_exp_name is the best measured ({best['name']})")
for z in ("z0", "z1"):
    n = sum(1 for e in launched if e["stage"] == int(z[1]))
    check(rows.get(z, [""] * 4)[1] == str(n), f"{z} num_experiments = its experiments ({n})")
check("Tuning completed in" in out, "the total tuning time is printed")

# The best config trains as written.
best_yaml = os.path.join(d, "tune", "best.yaml")
rc, _, err = run([os.path.join(BIN, "triad-launch"), "--nproc-per-node", "2", best_yaml, "-q",
                  "--set", "training.train_iters=2", "--set", "output.dir=trained"], d)
check(rc == 0, f"best.yaml trains on 2 ranks (exit {rc}: {err.strip()[-200:]})")
recs = open(os.path.join(d, "trained", "metrics.jsonl")).read().splitlines() if rc == 0 else []
check(len(recs) == 2, "it wrote 2 steps of metrics")
import yaml  # noqa: E402
cfg = yaml.safe_load(open(best_yaml))
ds = json.load(open(os.path.join(d, "tune", "best_ds_config.json")))
check(cfg["training"]["micro_batch_size"] == best["micro_batch_size"] ==
      ds["train_micro_batch_size_per_gpu"], "best.yaml and the JSON view hold the best micro-batch")
check(cfg["zero_optimization"]["stage"] == best["stage"] == ds["zero_optimization"]["stage"],
      "best.yaml and the JSON view hold the best ZeRO stage")
check(cfg["training"]["train_iters"] == 50, "best.yaml keeps the base config's train_iters")

# Every candidate of a small space (no --fast): micro-batches 1, 2, 64; 64 cannot fit.
rc, out, err = run([TUNE, "tiny.yaml", "--world", "2", "--memory-per-device", "6MiB",
                    "--zero-stages", "0", "--tp", "1", "--pp", "1", "--attention", "naive",
                    "--checkpointing", "off", "--micro-batch-sizes", "1,2,64", "--steps", "1",
                    "--output", "all"], d)
j = json.load(open(os.path.join(d, "all", "autotune.json"))) if rc == 0 else {"experiments": []}
names = sorted(e["name"] for e in j["experiments"] if e["status"] == "ok")
check(rc == 0 and names == ["z0_tp1_pp1_mbs1_gas1_naive", "z0_tp1_pp1_mbs2_gas1_naive"],
      f"the exhaustive run ran micro-batches 1 and 2 ({names})")
check(j.get("pruned") == 1, "and pruned 64")

# --confirm 2: the two best of three run twice more each; each is ranked by the median of its
# three runs, and the best is the best of those (the third's single run does not compete).
rc, out, err = run([TUNE, "tiny.yaml", "--world", "2", "--memory-per-device", "6MiB",
                    "--zero-stages", "0", "--tp", "1", "--pp", "1", "--attention", "naive",
                    "--checkpointing", "off", "--micro-batch-sizes", "1,2,3", "--steps", "1",
                    "--confirm", "2", "--output", "confirm"], d)
check(rc == 0, f"autotune --confirm exits 0 (got {rc}: {err.strip()[-300:]})")
j = json.load(open(os.path.join(d, "confirm", "autotune.json"))) if rc == 0 else {}
conf = [e for e in j.get("experiments", []) if "runs" in e]
check(len(conf) == 2 and all(len(e["runs"]) == 3 for e in conf),
      f"--confirm 2 ran each of the two best three times ({[e.get('runs') for e in conf]})")
check(all(e["value"] == sorted(e["runs"])[1] and e["first_value"] == e["runs"][0] for e in conf),
      "each confirmed value is the median of its three runs")
check(all(os.path.isfile(os.path.join(d, "confirm", "experiments", e["name"], f"repeat-{r}",
                                       "result.json")) for e in conf for r in (1, 2)),
      "the reruns' results are kept beside the first run's")
if conf:
    top = max(conf, key=lambda e: e["value"])
    check(j["best"] == top["name"] and j["best_value"] == top["value"],
          f"the best is the best median ({j['best']} vs {top['name']})")
check(j.get("experiments_run") == 7, f"3 first runs + 4 reruns ({j.get('experiments_run')})")
check(out.count("confirmed: ") == 2, "the summary lists both confirmed experiments")

# Bad input.
rc, out, err = run([TUNE, "nope.yaml"], d)
check_bad_input("triad-autotune", rc, err, ["nope.yaml"], "a missing config")
rc, out, err = run([TUNE, "tiny.yaml", "--zero-stages", "0,5"], d)
check_bad_input("triad-autotune", rc, err, ["--zero-stages", "0,5"], "a ZeRO stage out of range")
rc, out, err = run([TUNE, "tiny.yaml", "--set", "model.num_layerz=2"], d)
check_bad_input("triad-autotune", rc, err, ["num_layerz"], "an unknown key in --set")
rc, out, err = run([TUNE, "tiny.yaml", "--confirm", "-1"], d)
check_bad_input("triad-autotune", rc, err, ["--confirm", "-1"], "a negative --confirm")

finish("autotune_test", d)
