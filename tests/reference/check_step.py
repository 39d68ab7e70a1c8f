"""Checks one Triad training step against the PyTorch reference (gpt_torch.py).

Usage: check_step.py DUMP_DIR [--tol 1e-5]
DUMP_DIR is written by test-dump-step. The reference runs in float64 on the same weights and
batch; Triad's fp32 loss and every parameter gradient must agree to the tolerance, with the
relative error of a tensor defined as ||triad - ref||_2 / ||ref||_2 (max-abs for the loss).
Every tensor must vary (no bias left at 0, no layernorm weight at 1), or a forward that
dropped a term could pass.
If DUMP_DIR/hf exists, the Hugging Face export is loaded too and must give the same loss."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed for this interpreter (Debian: apt-get install python3-torch)")
    sys.exit(77)

import gpt_torch  # noqa: E402


def main():
    d = sys.argv[1]
    tol = float(sys.argv[sys.argv.index("--tol") + 1]) if "--tol" in sys.argv else 1e-5
    result = json.load(open(os.path.join(d, "result.json")))
    weights = gpt_torch.read_safetensors(os.path.join(d, "weights.safetensors"))
    grads = gpt_torch.read_safetensors(os.path.join(d, "grads.safetensors"))
    batch = gpt_torch.read_safetensors(os.path.join(d, "batch.safetensors"))
    idx = torch.from_numpy(batch["inputs"]).long()
    tgt = torch.from_numpy(batch["targets"]).long()

    failures = 0
    for name, w in weights.items():
        if w.size > 1 and w.std() == 0:
            print(f"  FAIL weight {name} is constant ({w.flat[0]}): the dump was not perturbed")
            failures += 1

    model = gpt_torch.from_result(result)
    model.load_triad(weights)
    loss = model(idx, tgt)
    loss.backward()
    rel = abs(result["loss"] - loss.item()) / abs(loss.item())
    print(f"loss triad {result['loss']:.8f} torch {loss.item():.8f} rel {rel:.2e}")
    failures += rel > tol
    worst = 0.0
    for name, p in model.named_triad_params():
        ref = p.grad.detach().double()
        ours = torch.from_numpy(grads[name]).double()
        err = (ours - ref).norm().item() / max(ref.norm().item(), 1e-30)
        worst = max(worst, err)
        flag = "FAIL" if err > tol else "ok"
        if err > tol:
            failures += 1
        print(f"  {flag:4} grad {name:28} rel {err:.2e}")
    print(f"worst gradient relative error {worst:.2e} (tolerance {tol:.0e})")

    hf = os.path.join(d, "hf")
    if os.path.isdir(hf):
        cfg = json.load(open(os.path.join(hf, "config.json")))
        m2 = gpt_torch.GPT(cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["vocab_size"],
                           cfg["n_positions"]).double()
        m2.load_hf(hf)
        with torch.no_grad():
            l2 = m2(idx, tgt).item()
        rel2 = abs(l2 - result["loss"]) / abs(l2)
        print(f"export_hf reloaded: loss {l2:.8f} rel {rel2:.2e}")
        failures += rel2 > tol
    print(f"{'FAILED' if failures else 'PASSED'}: {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
