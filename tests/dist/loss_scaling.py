"""Checks the loss-scaling runs of loss_scaling.sh.
Usage: loss_scaling.py WORK INJECTED_STEPS"""
import json
import os
import struct
import sys

work, injected = sys.argv[1], [int(s) for s in sys.argv[2].split(",")]
RTOL = 1e-5
fails = []


def metrics(name):
    with open(os.path.join(work, name, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def check(ok, what):
    if not ok:
        fails.append(what)


def close(a, b):
    return abs(a - b) <= RTOL * max(abs(a), 1e-12)


def tensors(path):
    """A safetensors file's tensors as raw bytes by name (the header's metadata left out)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}


def deepspeed_scales(overflow, power=16, window=2, hysteresis=2):
    """The scale of each step under DeepSpeed's dynamic rule, given each step's overflow."""
    scale, left, last, out = 2.0 ** power, hysteresis, -1, []
    for it, o in enumerate(overflow):
        out.append(scale)
        if o:
            if left == 1:
                scale /= 2
            else:
                left -= 1
            last = it
        elif (it - last) % window == 0:
            left, scale = hysteresis, scale * 2
    return out


plain, clean, single = metrics("plain"), metrics("clean"), metrics("single")
steps = list(range(1, 9))
for name, rows in (("plain", plain), ("clean", clean), ("single", single)):
    check([r["step"] for r in rows] == steps, f"{name}: steps {[r['step'] for r in rows]}")

# A scale that never overflows: the same numbers as no scaler (scaling by 2^16 is exact).
for a, b in zip(plain, clean):
    check(close(a["loss"], b["loss"]) and close(a["grad_norm"], b["grad_norm"]),
          f"clean step {b['step']}: loss {b['loss']} norm {b['grad_norm']}, without the scaler "
          f"{a['loss']} {a['grad_norm']}")
clean_scales = [r["loss_scale"] for r in clean]
check(not any(r["skipped"] for r in clean) and clean_scales == deepspeed_scales([False] * 8),
      f"clean: skipped {[r['skipped'] for r in clean]}, scales {clean_scales}")

# The injected steps are skipped, the others not; the scale follows DeepSpeed's rule.
skipped = [r["step"] for r in single if r["skipped"]]
check(skipped == injected, f"single: skipped steps {skipped}, injected {injected}")
want_scales = deepspeed_scales([s in injected for s in steps])
check([r["loss_scale"] for r in single] == want_scales,
      f"single: scales {[r['loss_scale'] for r in single]}, DeepSpeed's rule {want_scales}")
check([r["skipped_total"] for r in single] == [sum(s in injected for s in steps[:i + 1])
                                               for i in range(len(steps))],
      f"single: skipped_total {[r['skipped_total'] for r in single]}")
check(all(r["grad_norm"] is None for r in single if r["skipped"]),
      "single: a skipped step reports a gradient norm")
# The schedule follows the optimizer steps: step k runs at the plain run's lr of its optimizer
# step (skipped steps do not advance it).
taken = 0
for r in single:
    check(r["lr"] == plain[taken]["lr"],
          f"single step {r['step']}: lr {r['lr']}, expected optimizer step {taken + 1}'s "
          f"{plain[taken]['lr']}")
    taken += not r["skipped"]

# The checkpoint of a skipped step holds its predecessor's weights and moments, bit for bit.
ckpt = os.path.join(work, "single", "ckpt")
for s in injected:
    before = tensors(os.path.join(ckpt, f"iter_{s - 1:07d}", "rank_00000.safetensors"))
    after = tensors(os.path.join(ckpt, f"iter_{s:07d}", "rank_00000.safetensors"))
    check(before == after, f"single: checkpoint of skipped step {s} differs from step {s - 1}'s")
    meta = json.load(open(os.path.join(ckpt, f"iter_{s:07d}", "metadata.json")))
    check(meta["optimizer"]["steps"] == s - sum(i in injected for i in range(1, s + 1)),
          f"single: step {s}'s checkpoint says {meta['optimizer']['steps']} optimizer steps")
for s in (s for s in steps[1:] if s not in injected):
    a = tensors(os.path.join(ckpt, f"iter_{s - 1:07d}", "rank_00000.safetensors"))
    b = tensors(os.path.join(ckpt, f"iter_{s:07d}", "rank_00000.safetensors"))
    check(a != b, f"single: step {s} was not skipped but its checkpoint equals step {s - 1}'s")

# Every layout with the overflow on its last rank: the same steps skipped, the same scales, the
# same losses and norms as the single process.
for name in ("tp2_sp", "pp2", "dp2_zero1", "dp2_zero3_offload", "tp2_pp2", "resumed"):
    rows = metrics(name)
    check([r["step"] for r in rows] == steps, f"{name}: steps {[r['step'] for r in rows]}")
    for a, b in zip(single, rows):
        same = (a["skipped"] == b["skipped"] and a["loss_scale"] == b["loss_scale"]
                and a["skipped_total"] == b["skipped_total"])
        if name == "resumed":  # bit for bit
            same = same and a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]
        else:
            same = same and close(a["loss"], b["loss"]) and (
                a["grad_norm"] is None and b["grad_norm"] is None
                or a["grad_norm"] is not None and b["grad_norm"] is not None
                and close(a["grad_norm"], b["grad_norm"]))
        check(same, f"{name} step {b['step']}: {b}, single process {a}")

# A scale whose scaled squares pass fp32's range (2^100): the norm, unscaled before it is summed
# over ranks, is the plain run's, and so is every step.
for name in ("huge_pp2", "huge_dp2_zero1"):
    rows = metrics(name)
    check(len(rows) == 8, f"{name}: {len(rows)} steps, not 8")
    for a, b in zip(plain, rows):
        check(b["grad_norm"] is not None and close(a["loss"], b["loss"])
              and close(a["grad_norm"], b["grad_norm"]) and not b["skipped"],
              f"{name} step {b['step']}: {b}, without the scaler {a}")

# A scale beyond fp32's range overflows by itself. Each micro-batch's loss gradient is scaled by
# scale / 4 (the mean over 4 micro-batches): from 2^131 down, 2^131 and 2^130 give an inf, which
# every step at such a scale must skip; the halved scale then trains.
beyond = metrics("beyond_fp32")
inf_steps = [r["step"] for r in beyond if r["loss_scale"] / 4 >= 2.0 ** 128]
check(inf_steps == [1, 2], f"beyond_fp32: scales {[r['loss_scale'] for r in beyond]}")
check(all(r["skipped"] for r in beyond if r["step"] in inf_steps),
      f"beyond_fp32: a step at a scale beyond fp32 was not skipped: {beyond}")
check(not beyond[-1]["skipped"], f"beyond_fp32: the scaler never recovered: {beyond}")

for f in fails:
    print("FAIL", f)
print(f"loss scaling: {'FAIL' if fails else 'ok'} ({len(fails)} failures)")
sys.exit(1 if fails else 0)
