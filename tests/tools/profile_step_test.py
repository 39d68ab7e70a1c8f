"""tools/cuda/profile-step --from on ncu CSVs written here (no GPU): kernels summed into their
groups (GEMMs, attention, bias gradients, layernorm with its column sums, GELU, AdamW,
cross-entropy, embedding, the rest) per step, the steps counted as the attention backward's
launches / --layers, two files side by side, and a CSV without an attention backward refused.
    profile_step_test.py SOURCE_DIR
"""
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, finish, scratch  # noqa: E402

TOOL = os.path.join(os.path.abspath(sys.argv[1]), "tools", "cuda", "profile-step")
HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"')


def csv(path, kernels):
    """kernels: (name, ns) per launch, as ncu --csv --print-units base writes them."""
    with open(path, "w") as f:
        f.write("==PROF== Connected to process 1\n" + HEAD + "\n")
        for i, (name, ns) in enumerate(kernels):
            f.write(f'"{i}","1","triad-launch","h","{name}","1","7","(256, 1, 1)","(1, 1, 1)",'
                    f'"0","9.0","Command line profiler metrics","gpu__time_duration.sum",'
                    f'"nsecond","{ns:,}"\n')


def table(out):
    rows = {}
    for line in out.splitlines():
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        if len(cells) >= 2 and cells[0] and not cells[0].startswith("---"):
            rows[cells[0]] = cells[1:]
    return rows


d = scratch("profile-step-test-")
# Two layers, two steps: 4 launches of the flash backward's dq kernel.
step = [("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 3_000_000),
        ("void flash::flash_bwd_dq_kernel<__nv_bfloat16, 64, 64, 64, 4>(Params)", 500_000),
        ("void flash::flash_bwd_dq_kernel<__nv_bfloat16, 64, 64, 64, 4>(Params)", 500_000),
        ("void flash::flash2_fwd_kernel<__nv_bfloat16, 64, 128, 64, 4>(Params)", 400_000),
        ("void detail::column_partials_kernel<detail::BiasGradTerm<__nv_bfloat16>, 8>(double*)",
         200_000),
        ("void detail::column_finish_kernel<1>(ColumnDst<1>, const double*, int, int)", 50_000),
        ("void triad::<unnamed>::layernorm_backward_kernel<__nv_bfloat16, 8>(x)", 120_000),
        ("void detail::column_partials_kernel<triad::<unnamed>::ParamGradTerm<bf16>, 8>(x)",
         80_000),
        ("void detail::elementwise_kernel<triad::<unnamed>::GeluBackward<bf16>>(x)", 300_000),
        ("void detail::elementwise_kernel<triad::<unnamed>::AdamW<1>>(x)", 250_000),
        ("void triad::<unnamed>::crossentropy_forward_kernel<__nv_bfloat16>(x)", 600_000),
        ("void triad::<unnamed>::embedding_backward_wte_kernel<__nv_bfloat16>(x)", 70_000),
        ("triad::<unnamed>::finish_sum_kernel(x)", 10_000)]
csv(os.path.join(d, "a.csv"), step * 2)
# The same run with the GELU gone and the GEMMs 1 ms slower per step.
other = [k for k in step if "Gelu" not in k[0]]
other.append(("sm90_xmma_gemm_bf16bf16_bf16f32_nn", 1_000_000))
csv(os.path.join(d, "b.csv"), other * 2)
r = subprocess.run([sys.executable, TOOL, "--layers", "2", "--from", os.path.join(d, "a.csv"),
                    os.path.join(d, "b.csv")], capture_output=True, text=True)
print(r.stdout + r.stderr)
check(r.returncode == 0, f"profile-step --from exits 0 (got {r.returncode})")
t = table(r.stdout)
want = {"GEMMs (cuBLASLt)": ("3.00", "4.00"), "attention": ("1.40", "1.40"),
        "bias gradients": ("0.25", "0.25"), "layernorm (+ its dweight/dbias)": ("0.20", "0.20"),
        "GELU (element-wise)": ("0.30", "0.00"), "AdamW": ("0.25", "0.25"),
        "cross-entropy": ("0.60", "0.60"), "embedding": ("0.07", "0.07"),
        "the rest": ("0.01", "0.01"), "sum of kernel times": ("6.08", "6.78")}
for group, cells in want.items():
    check(tuple(t.get(group, ())) == cells, f"{group}: ms per step {cells} ({t.get(group)})")
# --layers 4: the window's 4 launches are one step's, so each group's whole time.
r = subprocess.run([sys.executable, TOOL, "--layers", "4", "--from", os.path.join(d, "a.csv")],
                   capture_output=True, text=True)
check(table(r.stdout).get("GEMMs (cuBLASLt)") == ["6.00"],
      "--layers 4: one step in the window, so each group's whole time")
# A window without the attention backward cannot say how many steps it holds.
csv(os.path.join(d, "c.csv"), [step[0]])
r = subprocess.run([sys.executable, TOOL, "--from", os.path.join(d, "c.csv")],
                   capture_output=True, text=True)
check(r.returncode == 2 and "no attention backward kernel" in r.stderr
      and len(r.stderr.strip().splitlines()) == 1,
      f"a CSV without an attention backward is refused in one line ({r.stderr.strip()})")
for args, what in ((["--from", os.path.join(d, "nope.csv")], "nope.csv"),
                   (["--layers", "0", "--from", os.path.join(d, "a.csv")], "--layers 0"),
                   (["--no-such-flag"], "--no-such-flag")):
    r = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and what in r.stderr,
          f"bad input {args}: one line naming '{what}', exit 2 ({r.returncode}: {r.stderr.strip()})")
finish("profile_step_test", d)
