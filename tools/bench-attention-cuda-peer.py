#!/usr/bin/env python3
"""Peer of bench-attention-cuda: PyTorch SDPA (flash backend) on the same shapes.

Times torch.nn.functional.scaled_dot_product_attention under
sdpa_kernel(SDPBackend.FLASH_ATTENTION) with triton.testing.do_bench (median), forward and
forward+backward, for B*T = tokens (default 32768), H*D = 2048, T = 1k..16k, D = 64 and 128,
causal and not. FLOPs as FlashAttention reports them: forward 4 B H T^2 D (halved when causal),
forward+backward 3.5x that.

Given the JSON of `bench-attention-cuda --json`, prints one table with Triad flash1, flash2 and
SDPA and the ratios flash2/SDPA and flash2/flash1, and writes a PNG plot (matplotlib).

  bench-attention-cuda-peer.py [--triad triad.json] [--json sdpa.json] [--plot out.png]
                               [--tokens N] [--d 64,128] [--t 1024,...] [--causal 0,1]
                               [--dtype bf16|fp16] [--sdpa-json sdpa.json]

--sdpa-json reuses SDPA timings saved by an earlier --json instead of timing again.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triad_experiments as tx  # noqa: E402

TOOL = "bench-attention-cuda-peer.py"


def ints(s):
    try:
        return [int(x) for x in s.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of whole numbers")


def flops_fwd(b, h, t, d, causal):
    return 4.0 * b * h * t * t * d / (2 if causal else 1)


def time_sdpa(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    rows = []
    for d in args.d:
        for causal in args.causal:
            for t in args.t:
                b, h = args.tokens // t, 2048 // d
                if b < 1:
                    continue
                torch.manual_seed(0)
                q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=dtype, requires_grad=True)
                           for _ in range(3))
                dout = torch.randn(b, h, t, d, device="cuda", dtype=dtype)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                    fb = lambda: fwd().backward(dout)
                    fwd_ms = do_bench(fwd, return_mode="median")
                    fb_ms = do_bench(fb, grad_to_none=[q, k, v], return_mode="median")
                f = flops_fwd(b, h, t, d, causal)
                row = {"algo": "sdpa", "D": d, "T": t, "B": b, "H": h, "causal": bool(causal),
                       "fwd_ms": fwd_ms, "fwd_tflops": f / (fwd_ms * 1e-3) / 1e12,
                       "fwdbwd_ms": fb_ms, "fwdbwd_tflops": 3.5 * f / (fb_ms * 1e-3) / 1e12}
                print(f"sdpa D={d:3d} T={t:5d} B={b:2d} H={h:2d} causal={causal}: "
                      f"fwd {row['fwd_tflops']:6.1f} TFLOP/s, fwd+bwd {row['fwdbwd_tflops']:6.1f}",
                      flush=True)
                rows.append(row)
                del q, k, v, dout
                torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "dtype": args.dtype, "tokens": args.tokens, "results": rows}


def key(r):
    return (r["D"], bool(r["causal"]), r["T"])


def table(sdpa, triad):
    by = {}
    for r in sdpa["results"]:
        by.setdefault(key(r), {})["sdpa"] = r
    for r in triad["results"]:
        by.setdefault(key(r), {})[r["algo"]] = r
    print()
    print("TFLOP/s (%s, B*T = %d tokens, H*D = 2048); fwd | fwd+bwd" % (sdpa["dtype"], sdpa["tokens"]))
    head = ("  D causal     T |  flash1  flash2    sdpa  f2/sdpa  f2/f1 |"
            "  flash1  flash2 f2-det    sdpa  f2/sdpa  f2/f1")
    print(head)
    print("-" * len(head))

    def g(row, algo, field):
        r = row.get(algo)
        return r[field] if r else float("nan")

    for k in sorted(by):
        row = by[k]
        f1, f2, sd = (g(row, a, "fwd_tflops") for a in ("flash1", "flash2", "sdpa"))
        b1, b2, bd, bs = (g(row, a, "fwdbwd_tflops") for a in ("flash1", "flash2", "flash2-det", "sdpa"))
        print("%3d %6s %5d | %7.1f %7.1f %7.1f %8.2f %6.2f | %7.1f %7.1f %6.1f %7.1f %8.2f %6.2f" %
              (k[0], "yes" if k[1] else "no", k[2], f1, f2, sd, f2 / sd, f2 / f1,
               b1, b2, bd, bs, b2 / bs, b2 / b1))
    return by


def plot(by, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = sorted({k[0] for k in by})
    cs = sorted({k[1] for k in by})
    fig, axes = plt.subplots(len(ds), len(cs), figsize=(6 * len(cs), 4 * len(ds)), squeeze=False)
    styles = {"flash1": "tab:blue", "flash2": "tab:red", "sdpa": "tab:gray"}
    for i, d in enumerate(ds):
        for j, c in enumerate(cs):
            ax = axes[i][j]
            ts = sorted(k[2] for k in by if k[0] == d and k[1] == c)
            for algo, color in styles.items():
                for field, ls, label in (("fwd_tflops", "-", "fwd"), ("fwdbwd_tflops", "--", "fwd+bwd")):
                    ys = [by[(d, c, t)].get(algo, {}).get(field, float("nan")) for t in ts]
                    ax.plot(ts, ys, ls, color=color, marker="o", label=f"{algo} {label}")
            ax.set_xscale("log", base=2)
            ax.set_xticks(ts)
            ax.set_xticklabels([str(t) for t in ts])
            ax.set_title(f"D={d}, {'causal' if c else 'non-causal'}")
            ax.set_xlabel("sequence length T")
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main():
    ap = tx.ArgumentParser(prog=TOOL, description=__doc__.splitlines()[0])
    ap.add_argument("--triad", help="JSON from bench-attention-cuda --json")
    ap.add_argument("--json", help="write the SDPA timings here")
    ap.add_argument("--plot", default="bench-attention-cuda.png")
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--d", type=ints, default=[64, 128])
    ap.add_argument("--t", type=ints, default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--causal", type=ints, default=[0, 1])
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--sdpa-json", help="reuse SDPA timings from an earlier --json")
    args = ap.parse_args()
    if args.sdpa_json:
        with open(args.sdpa_json) as f:
            sdpa = json.load(f)
    else:
        sdpa = time_sdpa(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(sdpa, f, indent=1)
    if args.triad:
        with open(args.triad) as f:
            triad = json.load(f)
        by = table(sdpa, triad)
        if args.plot:
            plot(by, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(tx.run_main(TOOL, main))
