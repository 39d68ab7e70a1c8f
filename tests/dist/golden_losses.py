"""Compares (or writes) the golden-loss matrix's results; see golden_losses.sh.
Usage: golden_losses.py WORK GOLDEN.json [--write | --exact | --rtol X]"""
import hashlib
import json
import os
import sys

work, golden_path, *opts = sys.argv[1:]
LAYOUTS = ["single", "dp2_zero1", "tp2_sp", "pp2_1f1b", "pp2_interleaved2", "dp2_zero3_offload",
           "tp2_pp2_dp2", "recompute_full", "dp2_zero2_resumed", "evaluation"]
RTOL = 1e-5


def results():
    out = {}
    for name in LAYOUTS:
        rows = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl")) if l.strip()]
        steps = [r["step"] for r in rows]
        if steps != list(range(1, 11)):
            sys.exit(f"FAIL {name}: steps {steps}, expected 1..10 once each")
        rec = {"loss": [r["loss"] for r in rows], "grad_norm": [r["grad_norm"] for r in rows]}
        valid = {str(r["step"]): r["valid_loss"] for r in rows if "valid_loss" in r}
        # Megatron's second evaluation at the end of training, after a last step that evaluated.
        valid.update({f"{r['step']} end": r["valid_loss_end"] for r in rows if "valid_loss_end" in r})
        if valid:
            rec["valid_loss"] = valid
        out[name] = rec
    with open(os.path.join(work, "single", "hf", "model.safetensors"), "rb") as f:
        out["single"]["export_sha256"] = hashlib.sha256(f.read()).hexdigest()
    return out


got = results()
if opts == ["--write"]:
    doc = {"about": "gpt-tiny (4 layers), seed 1234, global batch 8, lr 1e-3, 10 steps, fp32 on the CPU "
                    "(x86-64, AVX2 kernels, oneDNN GEMMs); "
                    "written by tests/dist/golden_losses.sh --write",
           "layouts": got}
    with open(golden_path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(golden_path + ".tmp", golden_path)
    print(f"wrote {golden_path}: {len(got)} layouts")
    sys.exit(0)

exact = opts == ["--exact"]
rtol = float(opts[1]) if opts[:1] == ["--rtol"] else RTOL
golden = json.load(open(golden_path))["layouts"]
fails, worst = 0, (0.0, "")
for name in LAYOUTS:
    want, have = golden[name], got[name]
    pairs = [(f"loss[{i + 1}]", a, b) for i, (a, b) in enumerate(zip(want["loss"], have["loss"]))]
    pairs += [(f"grad_norm[{i + 1}]", a, b)
              for i, (a, b) in enumerate(zip(want["grad_norm"], have["grad_norm"]))]
    if set(want.get("valid_loss", {})) != set(have.get("valid_loss", {})):
        print(f"FAIL {name}: validation at steps {sorted(have.get('valid_loss', {}))}, golden "
              f"{sorted(want.get('valid_loss', {}))}")
        fails += 1
    pairs += [(f"valid_loss@{s}", v, have["valid_loss"][s])
              for s, v in want.get("valid_loss", {}).items() if s in have.get("valid_loss", {})]
    if exact and "export_sha256" in want:
        pairs.append(("export_hf sha256", want["export_sha256"], have["export_sha256"]))
    for what, a, b in pairs:
        if isinstance(a, str):
            ok, rel = a == b, 0.0
        else:
            rel = abs(a - b) / max(abs(a), 1e-12)
            ok = a == b if exact else rel <= rtol
            if rel > worst[0]:
                worst = (rel, f"{name} {what}")
        if not ok:
            print(f"FAIL {name} {what}: {b!r}, golden {a!r} (relative {rel:.2e}, "
                  f"tolerance {'0' if exact else f'{rtol:g}'})")
            fails += 1
print(f"golden losses: {len(LAYOUTS)} layouts, largest relative difference {worst[0]:.2e}"
      f"{' (' + worst[1] + ')' if worst[1] else ''}; "
      f"{'bit for bit' if exact else f'tolerance {rtol:g}'}: {'FAIL' if fails else 'ok'}")
sys.exit(1 if fails else 0)
