"""What the training benchmarks (tools/bench-train-cpu, tools/bench-train-gpu) share: one Triad
run through triad-launch, read back as its per-step metrics and its resolved config."""
import json
import os
import subprocess
import tempfile


def triad_run(launch, config, steps, overrides, env=None):
    """Trains `steps` steps; returns (metrics records, resolved config as {"section.key": v})."""
    import yaml
    out = tempfile.mkdtemp(prefix="triad-bench-")
    cmd = [launch, config, "-q", "--set", f"training.train_iters={steps}", "--set",
           f"output.dir={out}"]
    for o in overrides:
        cmd += ["--set", o]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    recs = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    cfg = {}
    for section, body in yaml.safe_load(open(os.path.join(out, "config.yaml"))).items():
        if isinstance(body, dict):
            cfg.update({f"{section}.{k}": v for k, v in body.items()})
        else:
            cfg[section] = body
    return recs, cfg
