"""Checks a short Triad training run against an AdamW loop in PyTorch, written independently.

Usage: check_train.py DUMP_DIR [--loss-tol 1e-5] [--weight-tol 1e-4]
DUMP_DIR is written by test-train-dump: the starting weights (DUMP_DIR/init, a Hugging Face
folder), every micro-batch, the settings, Triad's per-step loss, learning rate and gradient
norm, and its final weights (DUMP_DIR/final). The reference replays the run in float64 with
torch.optim.AdamW and PyTorch's conventions: weight decay only on matmul weights and
embeddings (not biases, not layernorm), gradients averaged over the micro-batches,
torch.nn.utils.clip_grad_norm_ on the global norm, and Megatron's schedule (linear warm-up,
then cosine or linear decay to min_lr at lr_decay_iters, min_lr after). Per step the loss
(relative), the learning rate and the gradient norm must agree; at the end every tensor
(||triad - ref||_2 / ||ref||_2). The run must clip on some steps and not on others, or the
check would not cover clipping."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed for this interpreter (Debian: apt-get install python3-torch)")
    sys.exit(77)

import gpt_torch  # noqa: E402


def megatron_lr(r, step):
    """Megatron-LM's AnnealingLR, steps counted from 1."""
    max_lr, min_lr, warmup = r["lr"], r["min_lr"], r["lr_warmup_iters"]
    decay = r["lr_decay_iters"] or r["train_iters"]
    if warmup > 0 and step <= warmup:
        return max_lr * step / warmup
    if r["lr_decay_style"] == "constant":
        return max_lr
    if step > decay:
        return min_lr
    ratio = (step - warmup) / (decay - warmup)
    if r["lr_decay_style"] == "linear":
        coeff = 1.0 - ratio
    else:
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return min_lr + coeff * (max_lr - min_lr)


def arg(name, default):
    return float(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def main():
    d = sys.argv[1]
    loss_tol, weight_tol = arg("--loss-tol", 1e-5), arg("--weight-tol", 1e-4)
    r = json.load(open(os.path.join(d, "result.json")))
    batches = gpt_torch.read_safetensors(os.path.join(d, "batches.safetensors"))
    inputs = torch.from_numpy(batches["inputs"]).long()
    targets = torch.from_numpy(batches["targets"]).long()
    steps, accum = inputs.shape[0], inputs.shape[1]

    model = gpt_torch.from_result(r)
    model.load_hf(os.path.join(d, "init"))
    # PyTorch / nanoGPT convention: 2-D tensors (matmul weights, embeddings) decay; biases and
    # layernorm parameters do not.
    decay, no_decay = [], []
    for _, p in model.named_triad_params():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": r["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=r["lr"], betas=(r["adam_beta1"], r["adam_beta2"]), eps=r["adam_eps"])
    params = [p for _, p in model.named_triad_params()]

    failures, clipped = 0, 0
    if len(r["steps"]) != steps:
        print(f"FAIL: Triad ran {len(r['steps'])} steps, the batches cover {steps}")
        failures += 1
    for s, ours in enumerate(r["steps"]):
        step = s + 1
        lr = megatron_lr(r, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        for a in range(accum):
            micro_loss = model(inputs[s, a], targets[s, a])
            (micro_loss / accum).backward()
            loss += micro_loss.item() / accum
        norm = torch.nn.utils.clip_grad_norm_(params, r["clip_grad"]).item()
        clipped += norm > r["clip_grad"]
        opt.step()
        e_loss = abs(ours["loss"] - loss) / abs(loss)
        e_lr = abs(ours["lr"] - lr) / lr
        e_norm = abs(ours["grad_norm"] - norm) / norm
        bad = e_loss > loss_tol or e_lr > 1e-12 or e_norm > 1e-4
        failures += bad
        print(f"  {'FAIL' if bad else 'ok':4} step {step:2}: loss triad {ours['loss']:.8f}"
              f" torch {loss:.8f} rel {e_loss:.1e} | lr {lr:.4e} (triad {ours['lr']:.4e})"
              f" | grad norm {norm:.5f} rel {e_norm:.1e}"
              f"{' clipped' if norm > r['clip_grad'] else ''}")
    if not 0 < clipped < steps:
        print(f"FAIL: clip_grad {r['clip_grad']} clipped {clipped} of {steps} steps; choose one the"
              " gradient norm crosses so both paths are checked")
        failures += 1

    final = gpt_torch.from_result(r)
    final.load_hf(os.path.join(d, "final"))
    worst = 0.0
    ours = dict(final.named_triad_params())
    for name, p in model.named_triad_params():
        ref = p.detach()
        err = (ours[name].detach() - ref).norm().item() / max(ref.norm().item(), 1e-30)
        worst = max(worst, err)
        failures += err > weight_tol
        print(f"  {'FAIL' if err > weight_tol else 'ok':4} final {name:28} rel {err:.2e}")
    print(f"worst final-weight relative error {worst:.2e} (tolerance {weight_tol:.0e});"
          f" clipped {clipped} of {steps} steps")
    print(f"{'FAILED' if failures else 'PASSED'}: {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
