#!/usr/bin/env python3
"""Draws a pipeline schedule's timeline, as triad-schedule --png writes it.

    python3 tools/plot_schedule.py TIMELINE.json OUT.png [--overwrite | --keep]

TIMELINE.json holds the schedule's name, stages, micro_batches, virtual_stages, makespan, bubble,
formula (1F1B's bubble, (p-1)/(v*m+p-1)), split (whether any backward is split in halves) and one
box per pass: stage, start, length (time units: forward 1, backward 2, each half of a split one
1), pass ("F" forward, "B" whole backward, "b" its input half, "W" its weight half), micro_batch
and chunk. The picture has one row per stage (stage 0 on top) and time running right; forwards
are blue, backwards and input halves green, weight halves orange, a lighter shade per later chunk,
each box labelled with its micro-batch. With split backwards the title gives the ideal
(p-1)/(3m+p-1) of F = B = W next to 1F1B's. Exit 2 with one line when matplotlib is missing,
OUT.png is not a .png name or cannot be written, or it exists and --overwrite is not given
(triad_experiments.plot_arguments).
"""
import json
import os
import sys

sys.path[:0] = [os.path.dirname(os.path.realpath(__file__))]  # tools/ or share/triad
import triad_experiments as tx  # noqa: E402

TOOL = "triad-schedule"


def main(argv):
    data, png = tx.plot_arguments(argv, "plot_schedule.py TIMELINE.json OUT.png "
                                        "[--overwrite | --keep]")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch, Rectangle
    except ImportError:
        raise tx.BadInput("--png needs matplotlib for python3, which is not installed (Debian: "
                          "apt-get install python3-matplotlib; or python3 -m pip install "
                          "matplotlib)")
    with open(data) as f:
        t = json.load(f)
    p, m, v, span = t["stages"], t["micro_batches"], t["virtual_stages"], t["makespan"]
    colours = {"F": matplotlib.colormaps["Blues"], "B": matplotlib.colormaps["Greens"],
               "b": matplotlib.colormaps["Greens"], "W": matplotlib.colormaps["Oranges"]}
    split = t.get("split", False)

    def shade(pass_, chunk):
        # Darkest for chunk 0, lighter for later chunks.
        return colours[pass_](0.75 - 0.4 * chunk / max(1, v - 1) if v > 1 else 0.65)

    fig, ax = plt.subplots(figsize=(min(40.0, 2.0 + 0.32 * span), 0.9 + 0.55 * p))
    for b in t["boxes"]:
        y = p - 1 - b["stage"]
        ax.add_patch(
            Rectangle((b["start"], y + 0.05), b["length"], 0.9,
                      facecolor=shade(b["pass"], b["chunk"]), edgecolor="black", linewidth=0.5))
        label = str(b["micro_batch"]) + (chr(ord("a") + b["chunk"]) if v > 1 else "")
        ax.text(b["start"] + b["length"] / 2, y + 0.5, label, ha="center", va="center",
                fontsize=8 if span < 120 else 6, color="white" if b["chunk"] == 0 else "black")
    ax.set_xlim(0, span)
    ax.set_ylim(0, p)
    ax.set_yticks([p - 1 - s + 0.5 for s in range(p)])
    ax.set_yticklabels(["stage %d" % s for s in range(p)])
    ax.set_xlabel("time (forward = 1 unit, backward = 2"
                  + (": input half B 1, weight half W 1)" if split else ")"))
    layout = "%d stages, %d micro-batches" % (p, m) + (", %d virtual stages" % v if v > 1 else "")
    formula = "(p-1)/(m+p-1)" if v == 1 else "(p-1)/(v*m+p-1)"
    if split and v == 1:
        ideal = (p - 1) / (3 * m + p - 1)
        ax.set_title("%s: %s; bubble %.3f\n(split backward (p-1)/(3m+p-1) = %.3f; 1F1B's %s = %.3f)"
                     % (t["schedule"], layout, t["bubble"], ideal, formula, t["formula"]),
                     fontsize=10)
    else:
        ax.set_title("%s: %s; bubble %.3f (%sformula %s = %.3f)"
                     % (t["schedule"], layout, t["bubble"], "1F1B's " if split else "", formula,
                        t["formula"]))
    passes = {b["pass"] for b in t["boxes"]}
    legend = [("F", "forward"), ("B", "backward"), ("b", "backward, input half (B)"),
              ("W", "backward, weight half (W)")]
    ax.legend(handles=[Patch(facecolor=shade(k, 0), label=label)
                       for k, label in legend if k in passes or k == "F"],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    tx.save_png(fig, png, 120)  # a .png name (plot_arguments); a write that fails names png
    return 0


if __name__ == "__main__":
    sys.exit(tx.run_main(TOOL, lambda: main(sys.argv)))
