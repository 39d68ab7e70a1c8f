"""tools/gpu-check on a machine without a GPU: it must run every section, report each row, and
write its table and gpu-check.json; no row may fail for a reason other than the missing GPU.
Usage: gpu_check_smoke.py GPU_CHECK BIN_DIR WORK_DIR"""
import json
import os
import shutil
import subprocess
import sys

check, bin_dir, work = sys.argv[1:]
shutil.rmtree(work, ignore_errors=True)
p = subprocess.run([sys.executable, check, "--bin", bin_dir, "--out", work, "--skip-bench"],
                   capture_output=True, text=True, timeout=280)
fails = []
if p.returncode not in (0, 1):
    fails.append(f"exit {p.returncode}: {p.stderr}")
doc = json.load(open(os.path.join(work, "gpu-check.json")))
names = [r[1] for r in doc["rows"]]
for want in ("fp32 GPU vs CPU", "tp 2", "pp 2 1f1b", "ZeRO-3 + offload dp 2", "tp 2 x pp 2",
             "transport suite", "GPT-2 124M bf16"):
    if want not in names:
        fails.append(f"no row '{want}' in {names}")
if "== gpu-check on" not in p.stdout:
    fails.append("no table printed")
# The CPU reference trained: its metrics are there.
if not os.path.exists(os.path.join(work, "runs", "cpu_fp32", "metrics.jsonl")):
    fails.append("the CPU reference run wrote no metrics")
for section, name, verdict, detail in doc["rows"]:
    gpu_missing = any(s in detail for s in ("no CUDA GPU", "not available in this build",
                                            "every case was skipped", "skipped"))
    if verdict == "FAIL" and not gpu_missing:
        fails.append(f"{section} {name}: {verdict} {detail}")
for f in fails:
    print("FAIL", f)
print("gpu-check smoke:", "FAIL" if fails else "ok", f"({len(doc['rows'])} rows)")
sys.exit(1 if fails else 0)
