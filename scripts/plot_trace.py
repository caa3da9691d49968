"""Draws a timeline written by ``last_pass.save_trace()`` (or a coordinator's) as a PNG: a row
per thread and lane as the trace names them, each span a bar coloured by its category (spans
inside spans drawn thinner on top), instants as ticks, and the counters (reads in flight,
resident pool, batch queue) as step plots below. For a picture of a trace where a browser
is not at hand; ui.perfetto.dev shows the same file interactively.

    .venv/bin/python scripts/plot_trace.py TRACE.json OUT.png [--from MS] [--to MS] [--title TEXT]

Needs matplotlib (requirements/bench.txt).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib

COLOURS = {"io": "#4C78A8", "queued": "#A6CEE3", "decode": "#F58518", "gather": "#54A24B", "wait": "#E45756",
           "residency": "#B279A2", "batch": "#72B7B2", "pass": "#BAB0AC", "window": "#9D755D"}
LEGEND = {"io": "read at the store / download", "queued": "read queued", "decode": "decode", "gather": "gather",
          "wait": "wait", "residency": "admission", "batch": "batch queued", "pass": "pass",
          "window": "prefetch window"}


def load(path: pathlib.Path) -> dict:
    doc = json.loads(path.read_text())
    names, ranks = {}, {}
    spans, instants = collections.defaultdict(list), collections.defaultdict(list)
    counters = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_sort_index":
            ranks[e["tid"]] = e["args"]["sort_index"]
        elif e["ph"] == "M" and e["name"] == "process_name":
            doc["process"] = e["args"]["name"]
        elif e["ph"] == "X":
            cat = "queued" if e["name"] == "queued" else e.get("cat", "")  # a read's (or download's) wait
            spans[e["tid"]].append((e["ts"] / 1000, e["dur"] / 1000, cat, e["name"]))
        elif e["ph"] in ("i", "I"):
            instants[e["tid"]].append((e["ts"] / 1000, e.get("cat", ""), e["name"]))
        elif e["ph"] == "C":
            (series, value), = e["args"].items()
            counters[f"{e['name']} ({series})"].append((e["ts"] / 1000, value))
    rows = sorted({*spans, *instants}, key=lambda t: (ranks.get(t, 10**9), t))
    return {"doc": doc, "names": names, "rows": rows, "spans": spans, "instants": instants, "counters": counters}


def draw(trace: dict, out: pathlib.Path, lo: float | None, hi: float | None, title: str | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows, names = trace["rows"], trace["names"]
    counters = trace["counters"]
    end = max((s + d for spans in trace["spans"].values() for s, d, _, _ in spans), default=1.0)
    lo, hi = lo or 0.0, hi or end
    heights = [max(3.0, 0.28 * len(rows))] + [0.9] * len(counters)
    fig, axes = plt.subplots(1 + len(counters), 1, figsize=(13, sum(heights) + 0.9), sharex=True,
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    ax = axes[0][0]
    used = set()
    for y, tid in enumerate(rows):
        ordered = sorted(trace["spans"][tid], key=lambda s: (s[0], -s[1]))
        stack: list[float] = []  # ends of the spans the next one may lie inside
        for start, dur, cat, _ in ordered:
            while stack and stack[-1] <= start:
                stack.pop()
            depth = len(stack)
            stack.append(start + dur)
            if start + dur < lo or start > hi:
                continue
            h = 0.8 * 0.6**depth
            ax.broken_barh([(start, max(dur, (hi - lo) / 2000))], (y - h / 2, h), facecolors=COLOURS.get(cat, "#888"),
                           edgecolor="none")
            used.add(cat)
        for ts, cat, _ in trace["instants"][tid]:
            if lo <= ts <= hi:
                ax.plot([ts, ts], [y - 0.45, y + 0.45], color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [names.get(t, str(t)) for t in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_title(title or trace["doc"].get("process", "trace"), fontsize=10)
    ax.legend(handles=[Patch(color=COLOURS[c], label=LEGEND[c]) for c in COLOURS if c in used], fontsize=7,
              loc="upper left", bbox_to_anchor=(1.005, 1.0))
    ax.grid(axis="x", linewidth=0.3)
    for k, (name, points) in enumerate(sorted(counters.items())):
        cax = axes[k + 1][0]
        points.sort()
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        cax.step(xs, ys, where="post", linewidth=0.9, color="#333")
        cax.fill_between(xs, ys, step="post", alpha=0.2, color="#333")
        cax.set_ylabel(name, fontsize=7, rotation=0, ha="right", va="center")
        cax.tick_params(labelsize=7)
        cax.grid(axis="x", linewidth=0.3)
    axes[-1][0].set_xlim(lo, hi)
    axes[-1][0].set_xlabel("ms since the first event", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=pathlib.Path)
    p.add_argument("out", type=pathlib.Path)
    p.add_argument("--from", dest="lo", type=float, help="ms: start of the window drawn")
    p.add_argument("--to", dest="hi", type=float, help="ms: end of the window drawn")
    p.add_argument("--title")
    args = p.parse_args(argv)
    draw(load(args.trace), args.out, args.lo, args.hi, args.title)


if __name__ == "__main__":
    main()
