"""What the benchmarks (tools/bench-train-cpu, bench-train-gpu, bench-recompute) share: their
inputs checked before any work, and one Triad run through triad-launch, read back as its
per-step metrics and its resolved config."""
import json
import os
import shutil
import subprocess
import tempfile

import triad_experiments as tx


def check_inputs(launch, config, missing=None):
    """The launcher and the config, refused by name before a benchmark starts (a config that
    is a FIFO, a build folder without triad-launch: a traceback once the first run failed).
    `missing` says what lacks the launcher (default: --launch LAUNCH)."""
    if not (os.path.isfile(launch) and os.access(launch, os.X_OK)):
        raise tx.BadInput(f"{missing or f'--launch {launch!r} is not a program'}; build Triad "
                          f"(cmake --build build) or give the build it is in")
    tx.check_input_file(config, "--config", "give a YAML config, e.g. configs/gpt-tiny.yaml")


def triad_run(launch, config, steps, overrides, env=None):
    """Trains `steps` steps; returns (metrics records, resolved config as {"section.key": v}).
    A run triad-launch refuses or that fails is BadInput with the launcher's line."""
    import yaml
    out = tempfile.mkdtemp(prefix="triad-bench-")
    cmd = [launch, config, "-q", "--set", f"training.train_iters={steps}", "--set",
           f"output.dir={out}"]
    for o in overrides:
        cmd += ["--set", o]
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        line = tx.error_line(p.stderr).replace("triad-launch: error: ", "")
        raise tx.BadInput(f"triad-launch {os.path.basename(config)} stopped (exit "
                          f"{p.returncode}): {line or 'no message'}")
    recs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    cfg = {}
    for section, body in yaml.safe_load(open(os.path.join(out, "config.yaml"))).items():
        if isinstance(body, dict):
            cfg.update({f"{section}.{k}": v for k, v in body.items()})
        else:
            cfg[section] = body
    return recs, cfg
