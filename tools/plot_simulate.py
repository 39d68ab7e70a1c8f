#!/usr/bin/env python3
"""Draws triad-simulate's predictions, as triad-simulate --png writes them.

    python3 tools/plot_simulate.py PREDICTIONS.json OUT.png [--overwrite | --keep]

PREDICTIONS.json is triad-simulate's --json output (machine, source, config, layouts). One bar per
predicted layout, fastest (most samples/s) on top, its predicted step time split into compute,
tensor-parallel, pipeline bubble, data-parallel, optimizer and other, labelled with samples/s and
whether it fits in memory; refused layouts are left out. Exit 2 with one line when matplotlib is
missing, OUT.png is not a .png name or cannot be written, or it exists and --overwrite is not
given (triad_experiments.plot_arguments).
"""
import json
import os
import sys

sys.path[:0] = [os.path.dirname(os.path.realpath(__file__))]  # tools/ or share/triad
import triad_experiments as tx  # noqa: E402

TOOL = "triad-simulate"

PARTS = (("compute", "compute", "#4c72b0"), ("tensor_parallel", "tensor-parallel", "#dd8452"),
         ("pipeline_bubble", "pipeline bubble", "#c44e52"),
         ("data_parallel", "data-parallel", "#8172b3"), ("optimizer", "optimizer", "#55a868"),
         ("other", "other", "#937860"))


def main(argv):
    data, png = tx.plot_arguments(argv, "plot_simulate.py PREDICTIONS.json OUT.png "
                                        "[--overwrite | --keep]")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise tx.BadInput("--png needs matplotlib for python3, which is not installed "
                          "(Debian: apt-get install python3-matplotlib)")
    with open(data) as f:
        doc = json.load(f)
    rows = sorted((x for x in doc["layouts"] if "refused" not in x),
                  key=lambda x: -x["samples_per_s"])
    labels = [x["layout"] or "the config" for x in rows]
    height = max(2.2, 0.45 * len(rows) + 1.6)
    width = min(16.0, 8.0 + 0.06 * max((len(l) for l in labels), default=10))
    fig, ax = plt.subplots(figsize=(width, height))
    y = list(range(len(rows)))
    left = [0.0] * len(rows)
    for key, name, colour in PARTS:
        vals = [x["breakdown_ms"][key] for x in rows]
        ax.barh(y, vals, left=left, color=colour, label=name)
        left = [a + b for a, b in zip(left, vals)]
    top = max(left, default=1.0)
    for yi, x in zip(y, rows):
        ax.text(x["ms_per_step"] + top * 0.01, yi,
                f"{x['samples_per_s']:.4g} samples/s" + ("" if x["fits"] else ", does not fit"),
                va="center", fontsize=7)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.3)
    ax.set_xlabel("predicted ms per step")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"triad-simulate: {doc['config']} on {doc['machine']}\n{doc['source']}",
                 fontsize=9)
    fig.tight_layout()
    tx.save_png(fig, png, 110)
    plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(tx.run_main(TOOL, lambda: main(sys.argv)))
