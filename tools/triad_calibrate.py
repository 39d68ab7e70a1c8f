"""triad-simulate calibrate --out MACHINE.yaml [--config CONFIG] [--micro-batches 1,4,16]
                         [--attention naive,flash2] [--ranks 2] [--rounds 3] [--overwrite]

Measures this machine into a machine description for triad-simulate (the format:
core/include/triad/core/perf/machine.hpp; configs/machines/README.md says where each number of
the shipped ones comes from). What it runs, each through Triad's own programs:

- the config cut to 2 layers, ten steps traced (--profile-steps) at each micro-batch size and
  with each attention plugin, in --rounds alternated rounds (every size and plugin once, then
  again): each block's and the head's forward and backward time per micro-batch, the median
  over every round's spans; once more with a rank on each core, for ranks that share the node;
- a streamed add of large arrays (NumPy): the memory bandwidth;
- triad-bench-collectives on --ranks ranks of this node: each collective's latency and bandwidth
  (least squares over sizes, ring accounting);

then fits the description: the peak is the fastest rate seen, per attention plugin the curve of
a whole block's rate over it by its FLOPs and its backward / forward ratio, the head's curve
for other products, and the per-step overhead
(measured step less the model's prediction of the calibration runs). Ranks beyond one per node
share the node's cores: devices_per_node is 1.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path[:0] = [os.path.dirname(os.path.realpath(__file__))]
import triad_experiments as tx  # noqa: E402

TOOL = "triad-simulate calibrate"
HERE = os.path.dirname(os.path.realpath(__file__))
# The default model: the source tree's (tools/../configs), else the installed copy beside this
# script (<prefix>/share/triad/configs, tools/CMakeLists.txt installs it).
DEFAULT_CONFIGS = [os.path.normpath(os.path.join(HERE, "..", "configs", "gpt-tiny.yaml")),
                   os.path.join(HERE, "configs", "gpt-tiny.yaml")]
# What every traced run sets on top of the config (traced_spans): checked by a dry run first.
CUT = ["model.num_layers=2", "training.gradient_accumulation_steps=1", "data.kind=synthetic"]


def parse_args(argv):
    p = tx.ArgumentParser(prog=TOOL, description=tx.summary(__doc__.split("\n\n", 1)[1]))
    p.add_argument("--out", required=True, help="the machine description to write (YAML)")
    default = next((c for c in DEFAULT_CONFIGS if os.path.isfile(c)), None)
    p.add_argument("--config", default=default,
                   help="the model whose width, heads and sequence are measured (default: "
                        "configs/gpt-tiny.yaml)")
    p.add_argument("--micro-batches", default="1,4,16",
                   help="micro-batch sizes to measure (comma-separated; default 1,4,16)")
    p.add_argument("--attention", default="naive,flash2",
                   help="attention plugins to measure (comma-separated; default naive,flash2)")
    p.add_argument("--ranks", type=int, default=2, help="ranks for the collectives (default 2)")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternated rounds of the traced runs per micro-batch size and plugin, "
                        "their spans pooled (default 3: one round scatters by a tenth here)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    a = p.parse_args(argv)
    if a.config is None:
        raise tx.BadInput(f"--config is required here: the default configs/gpt-tiny.yaml is not "
                          f"in {' nor '.join(DEFAULT_CONFIGS)}; give --config CONFIG.yaml (e.g. "
                          f"Triad's configs/gpt-tiny.yaml)")
    tx.check_input_file(a.config, "config", "give a Triad YAML config")
    try:
        a.micro_batches = sorted({int(x) for x in a.micro_batches.split(",") if x.strip()})
    except ValueError:
        raise tx.BadInput(f"--micro-batches '{a.micro_batches}' is not a comma-separated list of "
                          f"whole numbers, e.g. 1,4,16")
    if len(a.micro_batches) < 2 or a.micro_batches[0] < 1:
        raise tx.BadInput("--micro-batches needs at least two sizes of 1 or more, e.g. 1,4,16")
    a.attention = [x.strip() for x in a.attention.split(",") if x.strip()]
    if not a.attention:
        raise tx.BadInput("--attention needs at least one plugin, e.g. naive,flash2")
    if not 1 <= a.rounds <= 20:
        raise tx.BadInput(f"--rounds {a.rounds} is outside 1..20; give e.g. --rounds 3")
    if not 2 <= a.ranks <= 64:
        raise tx.BadInput(f"--ranks {a.ranks} is outside 2..64; give e.g. --ranks 2")
    tx.check_output_file("--out", a.out, a.overwrite)
    return a


def check_runs(a, launch):
    """Dry-runs what the measurements will run before any is: the config cut to 2 layers at
    each micro-batch size, and each attention plugin; a refusal is bad input naming the flag
    (an unknown key of the config was found only after minutes of measuring)."""
    def refused(sets):
        ok, _, why = tx.dry_run(launch, a.config, CUT + sets, 1)
        return None if ok else why.replace("triad-launch: error: ", "")
    why = refused([])
    if why:
        raise tx.BadInput(f"--config '{a.config}' is refused: {why}; fix it or give another "
                          f"--config")
    for b in a.micro_batches:
        why = refused([f"training.micro_batch_size={b}"])
        if why:
            raise tx.BadInput(f"--micro-batches {b} is refused: {why}; drop that size")
    for p in a.attention:
        why = refused([f"attention={p}"])
        if why:
            raise tx.BadInput(f"--attention '{p}' is refused: {why}; give plugins triad-info "
                              f"--kind attention lists, e.g. naive,flash2")


def run(cmd, what, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise tx.BadInput(f"{what} failed (exit {r.returncode}): "
                          f"{tx.error_line(r.stderr + r.stdout)}")
    return r.stdout


def model_of(config):
    """The config's model section as the launcher resolves it (its --dry-run's config.yaml is not
    written, so read the YAML and let the dry run check it)."""
    doc = tx.load_yaml(config, "config", "give a Triad YAML config") or {}
    m = doc.get("model") or {}
    return {"h": int(m.get("hidden_size", 128)), "heads": int(m.get("num_attention_heads", 4)),
            "s": int(m.get("seq_length", 64)), "vocab": int(m.get("vocab_size", 256))}


SPANS = ("forward block", "backward block", "forward head", "backward head", "step")


def traced_spans(launch, config, b, work, attention="naive", ranks=1, extra=()):
    """({span name: [seconds]}, [ms per step]) of a 2-layer run of `config` at micro-batch b on
    `ranks` ranks with the `extra` overrides (OpenMP threads as the launcher gives them: every
    core for one rank, one each for a rank per core)."""
    out = os.path.join(work, f"trace-{attention}-b{b}" + (f"-r{ranks}" if ranks > 1 else "")
                       + "".join("-" + x.replace("=", "-") for x in extra))
    sets = CUT + [f"training.micro_batch_size={b}", "training.train_iters=12",
                  f"attention={attention}", f"output.dir={out}", "output.overwrite=true",
                  "training.eval_interval=0"] + list(extra)
    cmd = [launch, "--nproc-per-node", str(ranks), config, "-q", "--profile-steps", "3-12"]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    run(cmd, f"the traced run at micro-batch {b}", env)
    with open(os.path.join(out, "trace.json")) as f:
        events = json.load(f)["traceEvents"]
    spans = {}
    for e in events:
        if e.get("ph") == "X":
            name = " ".join(w for w in e["name"].split() if not w.isdigit())
            spans.setdefault(name, []).append(e["dur"] * 1e-6)
    missing = [n for n in SPANS if n not in spans]
    if missing:
        raise tx.BadInput(f"the traced run at micro-batch {b} has no '{missing[0]}' span; "
                          f"rebuild Triad (its trace lacks spans this calibration reads)")
    return spans, [r["ms_per_step"] for r in tx.read_metrics(out)[2:]]


def medians(runs):
    """Median forward / backward seconds of a block and of the head per micro-batch, and the
    median ms per step, over every span and step of `runs` (traced_spans' results)."""
    med = {n: statistics.median([x for spans, _ in runs for x in spans[n]]) for n in SPANS}
    med["ms_per_step"] = statistics.median([x for _, steps in runs for x in steps])
    return med


def traced_layers(*args, **kw):
    """medians() of one traced run (traced_spans' arguments)."""
    return medians([traced_spans(*args, **kw)])


def memory_bandwidth():
    """Bytes per second of a streamed add (two 64 MiB arrays read, one written), best of 5."""
    import numpy as np
    n = 16 << 20
    a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
    best = None
    for _ in range(5):
        t0 = time.perf_counter()
        np.add(a, b, out=c)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return 3 * 4 * n / best


def collectives(bench, ranks, work):
    """{op: (bandwidth B/s, latency s)} fitted to time = steps·α + volume·size/β."""
    path = os.path.join(work, "collectives.json")
    run([bench, "-n", str(ranks), "-b", "4K", "-e", "8M", "-f", "4", "-w", "3", "-i", "20",
         "--json", path], "triad-bench-collectives")
    with open(path) as f:
        rows = json.load(f)
    names = {"allreduce": "all_reduce", "allgather": "all_gather",
             "reducescatter": "reduce_scatter"}
    fit = {}
    n = ranks
    for op, name in names.items():
        pts = [(r["size"], r["time_us"] * 1e-6) for r in rows if r["op"] == op]
        steps = 2 * (n - 1) if op == "allreduce" else n - 1
        vol = (2 if op == "allreduce" else 1) * (n - 1) / n
        # time = steps·α + vol·size·(1/β): least squares in (α, 1/β), both kept positive.
        xs = [(steps, vol * s) for s, _ in pts]
        sxx = sum(a * a for a, _ in xs)
        sxy = sum(a * b for a, b in xs)
        syy = sum(b * b for _, b in xs)
        sxt = sum(a * t for (a, _), (_, t) in zip(xs, pts))
        syt = sum(b * t for (_, b), (_, t) in zip(xs, pts))
        det = sxx * syy - sxy * sxy
        alpha = (sxt * syy - syt * sxy) / det if det else 0
        inv_bw = (sxx * syt - sxy * sxt) / det if det else 0
        if alpha <= 0:
            alpha = 1e-7
        if inv_bw <= 0:
            big = max(pts)
            inv_bw = big[1] / (vol * big[0])
        fit[name] = (1 / inv_bw, alpha)
    return fit, rows


def curve(points, peak):
    """[[flops, share]] ascending, shares in (0, 1], one point per distinct size."""
    out = {}
    for flops, rate in points:
        out[flops] = min(1.0, max(1e-4, rate / peak))
    return [[float(f), round(out[f], 4)] for f in sorted(out)]


def write_description(path, a, d):
    eff = ", ".join(f"[{f:.4g}, {s}]" for f, s in d["efficiency"])
    blocks = "\n".join(
        f"    {p}: {{efficiency: [" + ", ".join(f"[{f:.4g}, {s}]" for f, s in b["efficiency"])
        + f"], backward_ratio: {b['backward_ratio']:.4g}}}" for p, b in d["blocks"].items())
    ops = ", ".join(f"{op}: {{bandwidth_gbs: {bw / 1e9:.4g}, latency_us: {lat * 1e6:.4g}}}"
                    for op, (bw, lat) in d["ops"].items())
    p2p_bw, p2p_lat = d["ops"]["all_gather"]
    link = f"{{bandwidth_gbs: {p2p_bw / 1e9:.4g}, latency_us: {p2p_lat * 1e6:.4g}"
    text = f"""# Measured by `triad-simulate calibrate` on {d['host']}, {d['date']}.
# Model measured: {a.config} cut to 2 layers, micro-batches {a.micro_batches} (trace spans);
# blocks: per attention plugin, medians over {a.rounds} rounds; memory: a streamed add (NumPy);
# collectives: triad-bench-collectives on {a.ranks} ranks, least squares over 4 KiB..8 MiB.
name: {d['name']}
source: "calibrated on {d['host']} ({d['cpu']}), {d['date']}"
devices_per_node: 1          # one CPU node: ranks on it share its cores
device:
  memory: {d['memory']}
  peak_tflops: {{fp32: {d['peak'] / 1e12:.6g}}}   # the fastest dense rate measured
  efficiency: [{eff}]   # the LM head's product, by its FLOPs
  blocks:   # whole blocks per attention plugin, forward by FLOPs; backward / forward
{blocks}
  memory_bandwidth_gbs: {d['bw'] / 1e9:.4g}
  backward_ratio: {d['backward_ratio']:.4g}   # the head's
  cores: {d['cores']}
  waiting_share: {d['waiting']:.3g}   # fitted to runs with two ranks per core, each beside one rank
  share_efficiency: {d['share']:.4g}   # cores x (time, one rank) / (time, a rank per core)
links:
  intra_node: {link}, {ops}}}
  inter_node: {link}}}   # one node: the same as within it
  host: {{bandwidth_gbs: {d['bw'] / 1e9:.4g}}}   # a CPU's host is itself
overheads: {{per_step_ms: {d['per_step_ms']:.4g}}}
calibration: {json.dumps(d['raw'])}
"""
    with tx.atomic_file(path) as f:
        f.write(text)


def fit_waiting(simulate, a, d, probe, b, sets, solo_sets, ratio):
    """The waiting_share in [0, 1] at which the model predicts the crowded run's step `ratio`
    times the step of the same model on one rank (`solo_sets`), as measured side by side
    (bisection; the crowded prediction grows with it, the single rank's does not depend on it)."""
    def predicted(w, world=2 * d["cores"], extra=sets):
        d["waiting"] = w
        write_description(probe, a, d)
        cmd = [simulate, a.config, "--machine", probe, "--json", "--world", str(world)]
        for x in ["model.num_layers=2", f"training.micro_batch_size={b}", "attention=naive",
                  "data.kind=synthetic"] + list(extra):
            cmd += ["--set", x]
        return json.loads(run(cmd, "triad-simulate on the crowded run"))["layouts"][0][
            "ms_per_step"]
    measured_ms = ratio * predicted(0.0, 1, solo_sets)
    lo, hi = 0.0, 1.0
    if predicted(lo) >= measured_ms:
        return lo
    if predicted(hi) <= measured_ms:
        return hi
    for _ in range(10):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicted(mid) < measured_ms else (lo, mid)
    return (lo + hi) / 2


def main(argv):
    a = parse_args(argv)
    launch, simulate = tx.find_program("triad-launch"), tx.find_program("triad-simulate")
    bench_coll = tx.find_program("triad-bench-collectives")
    check_runs(a, launch)  # before the load warning: bad input is its one line
    model = model_of(a.config)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"{TOOL}: warning: load average {load:.1f}: other work shares this machine, and "
              f"the description will say it is slower than it is; calibrate an idle machine",
              file=sys.stderr)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="triad-calibrate-") as work:
        # Per attention plugin, whole blocks at each micro-batch: forward by their FLOPs (the
        # dense products, 24·t·h², and the attention's as the plugin does them), backward over
        # forward; the head (2·t·h·V) gives the curve of other products.
        plugins = sorted(set(a.attention) | {"naive"})
        traces = {(p, b): [] for p in plugins for b in a.micro_batches}
        for _ in range(a.rounds):  # every size and plugin once per round: a drift hits all alike
            for (p, b), got in traces.items():
                got.append(traced_spans(launch, a.config, b, work, attention=p))
        runs = {p: {b: medians(traces[(p, b)]) for b in a.micro_batches} for p in plugins}
        layers = runs["naive"]
        bw = memory_bandwidth()
        # Ranks sharing the node: one per core, data-parallel, each on one thread (as the
        # launcher gives them), all computing at once; the rate a rank gets is the node's /
        # ranks x share_efficiency, where share_efficiency = cores x (a block's time with one
        # rank on every core) / (its time with a rank on each core).
        cores = len(os.sched_getaffinity(0))
        mid = a.micro_batches[-1]  # the largest: where a block is mostly products
        passes = ("forward block", "backward block", "forward head", "backward head")
        ratios = []  # three alternated pairs, their median: one pair scatters by a fifth
        for i in range(3):
            alone = traced_layers(launch, a.config, mid, work, extra=[f"training.seed={i + 2}"])
            shared = traced_layers(launch, a.config, mid, work, ranks=cores,
                                   extra=[f"training.seed={i + 2}"])
            ratios.append(sum(alone[k] for k in passes) / sum(shared[k] for k in passes))
        share = cores * statistics.median(ratios)
        # Twice as many ranks as cores, as a 2-stage pipeline, each run beside the same model on
        # one rank (three alternated pairs, the median of their step ratios, so that the
        # machine's drift between minutes cancels as in the sharing ratios): how much of a core
        # a waiting rank keeps (fitted below against the model's prediction of that ratio).
        crowd_sets = ("parallel.pipeline_model_parallel_size=2",
                      "training.gradient_accumulation_steps=4")
        solo_sets = ("training.gradient_accumulation_steps=4",)
        crowd_ratios = []
        for i in range(3):
            seed = [f"training.seed={i + 2}"]
            solo = traced_layers(launch, a.config, mid, work, extra=list(solo_sets) + seed)
            crowd = traced_layers(launch, a.config, mid, work, ranks=2 * cores,
                                  extra=list(crowd_sets) + seed)
            crowd_ratios.append(crowd["ms_per_step"] / solo["ms_per_step"])
        ops, raw_coll = collectives(bench_coll, a.ranks, work)
        h, s = model["h"], model["s"]
        vp = (model["vocab"] + 127) // 128 * 128

        def block_flops(p, b):
            per = 2 if p in ("flash1", "flash2") else 4  # the flash plugins skip the masked half
            return 24 * b * s * h * h + per * b * s * s * h

        blocks = {p: [(block_flops(p, b), block_flops(p, b) / runs[p][b]["forward block"])
                      for b in a.micro_batches] for p in plugins}
        head = [(2 * b * s * h * vp, 2 * b * s * h * vp / layers[b]["forward head"])
                for b in a.micro_batches]
        peak = max(r for pts in list(blocks.values()) + [head] for _, r in pts)
        d = {"efficiency": curve(head, peak), "bw": bw, "peak": peak, "ops": ops,
             "share": share, "cores": cores, "waiting": 0.0}
        d["blocks"] = {p: {"efficiency": curve(blocks[p], peak), "backward_ratio": statistics.median(
            runs[p][b]["backward block"] / runs[p][b]["forward block"] for b in a.micro_batches)}
            for p in plugins}
        d["backward_ratio"] = statistics.median(
            layers[b]["backward head"] / layers[b]["forward head"] for b in a.micro_batches)
        uname = os.uname()
        d["host"] = uname.nodename
        d["cpu"] = uname.machine
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            d["cpu"] = f"{names[0]}, {len(names)} CPUs"
        d["date"] = time.strftime("%Y-%m-%d")
        d["name"] = os.path.splitext(os.path.basename(a.out))[0]
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
        d["memory"] = f"{kib // 1024}MiB"
        d["per_step_ms"] = 0.0
        d["raw"] = {"layers": {str(b): layers[b] for b in layers},
                    "plugins": {p: {str(b): r[b] for b in r} for p, r in runs.items()},
                    "sharing_ratios": ratios, "crowded_ratios": crowd_ratios,
                    "memory_bandwidth": bw, "collectives": raw_coll}
        # The per-step overhead: what the calibration runs took beyond the model's prediction.
        probe = os.path.join(work, "probe.yaml")
        write_description(probe, a, d)
        over = []
        for b in a.micro_batches:
            pred = json.loads(run([simulate, a.config, "--machine", probe, "--json",
                                   "--set", "model.num_layers=2", "--set",
                                   f"training.micro_batch_size={b}", "--set",
                                   "training.gradient_accumulation_steps=1", "--set",
                                   "attention=naive", "--set", "data.kind=synthetic"],
                                  "triad-simulate on the calibration runs"))
            over.append(layers[b]["ms_per_step"] - pred["layouts"][0]["ms_per_step"])
        d["per_step_ms"] = max(0.0, statistics.median(over))
        d["waiting"] = fit_waiting(simulate, a, d, probe, mid, crowd_sets, solo_sets,
                                   statistics.median(crowd_ratios))
        write_description(a.out, a, d)
    print(f"{TOOL}: wrote {a.out} in {time.time() - t0:.0f} s: peak {peak / 1e9:.1f} GFLOP/s, "
          f"memory {bw / 1e9:.1f} GB/s, all-reduce {ops['all_reduce'][0] / 1e9:.2f} GB/s + "
          f"{ops['all_reduce'][1] * 1e6:.1f} us, backward/forward {d['backward_ratio']:.2f}, "
          f"sharing {d['share']:.2f}, waiting {d['waiting']:.2f}, "
          f"per-step overhead {d['per_step_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    tx.run_main(TOOL, lambda: main(sys.argv[1:]))
