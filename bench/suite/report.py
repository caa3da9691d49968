"""The suite's summary, tables, plots and the generated section of docs/benchmarks.md."""

from __future__ import annotations

import pathlib
import re

BEGIN, END = "<!-- suite:begin -->", "<!-- suite:end -->"
HEADING = "## Benchmark suite: insitubatch vs peers and ceilings"

LABELS = {"ours": "ours", "ours+torch": "ours + torch DataLoader", "original": "original insitubatch",
          "xbatcher": "xbatcher + DataLoader", "mapstyle": "map-style zarr + DataLoader", "naive": "naive loop",
          "inmem": "in-memory ceiling", "decode": "raw decode ceiling"}
PEERS = ("original", "xbatcher", "mapstyle", "naive")
CEILINGS = ("inmem", "decode")
# (key, what, target, higher is better)
TARGETS = (("vs_original", "ours / original samples/s", 1.5, True),
           ("vs_best_worker", "ours / best worker baseline", 1.0, True),
           ("vs_decode", "ours / raw decode ceiling", 0.9, True),
           ("ttfb_vs_original", "TTFB ours / original", 0.2, False),
           ("rss_vs_original", "peak RSS ours / original", 1.0, False))


def ok(row: dict | None) -> bool:
    return bool(row) and "samples_s" in row


def row_line(r: dict) -> str:
    w = f" w={r['workers']}" if r.get("workers") is not None else ""
    head = f"{r['engine']}{w}:"
    if "skipped" in r:
        return f"{head} {r['skipped']}"
    if "failed" in r:
        return f"{head} FAILED {r['failed']}"
    ttfb = f"{r['ttfb_s']:.2f} s" if r.get("ttfb_s") is not None else "-"
    extra = f" hit {r['hit_rate']:.2f}" if "hit_rate" in r else ""
    extra += f" cleared {r['samples_s_cleared']:.0f}/s" if "samples_s_cleared" in r else ""
    return (f"{head} {r['samples_s']:.0f} samples/s {r['mb_s']:.0f} MB/s ttfb {ttfb}"
            f" rss {r['peak_rss_mib']:.0f} MiB check {r['check']}{extra} ({r['wall_s']:.1f} s)")


def _div(a, b):
    return a / b if a is not None and b else None


def summarize(result: dict) -> dict:
    """Per dataset: the best row of each engine (swept peers: best worker count), ours'
    ratios to each, and each target with met / not met (None where a side is missing)."""
    out = {}
    for name in result["datasets"]:
        rows = [r for r in result["rows"] if r["dataset"] == name]
        best = {}
        for r in rows:
            if ok(r) and (r["engine"] not in best or r["samples_s"] > best[r["engine"]]["samples_s"]):
                best[r["engine"]] = r
        for r in rows:  # keep skipped / failed engines visible
            best.setdefault(r["engine"], r)
        ours = best.get("ours") if ok(best.get("ours")) else None
        rate = lambda e: best[e]["samples_s"] if ok(best.get(e)) else None  # noqa: E731
        ours_rate = ours["samples_s"] if ours else None
        ratios = {e: _div(ours_rate, rate(e)) for e in PEERS + ("inmem",)}
        ratios["decode"] = _div(ours.get("samples_s_cleared") if ours else None, rate("decode"))
        workers = [rate(e) for e in ("xbatcher", "mapstyle") if rate(e)]
        orig = best.get("original") if ok(best.get("original")) else None
        values = {
            "vs_original": ratios["original"],
            "vs_best_worker": _div(ours_rate, max(workers)) if workers else None,
            "vs_decode": ratios["decode"],
            "ttfb_vs_original": _div(ours and ours["ttfb_s"], orig and orig["ttfb_s"]),
            "rss_vs_original": _div(ours and ours["peak_rss_mib"], orig and orig["peak_rss_mib"]),
        }
        targets = {}
        for key, _, target, higher in TARGETS:
            v = values[key]
            targets[key] = {"value": v, "target": target,
                            "met": None if v is None else (v >= target if higher else v <= target)}
        out[name] = {"best": {e: {"workers": r.get("workers"), "samples_s": r.get("samples_s")}
                              for e, r in best.items()},
                     "ratios": ratios, "targets": targets}
    return out


# -- markdown ---------------------------------------------------------------------------------
def _f(v, fmt="{:.0f}", none="-"):
    return none if v is None else fmt.format(v)


def _cell(r: dict | None, key="samples_s", fmt="{:.0f}") -> str:
    if not r:
        return "-"
    if "skipped" in r:
        return "skipped"
    if "failed" in r:
        return "failed"
    v = _f(r.get(key), fmt)
    return f"{v} (N={r['workers']})" if r.get("workers") is not None else v


def _best_rows(result: dict, name: str) -> dict:
    best = {}
    for r in result["rows"]:
        if r["dataset"] != name:
            continue
        cur = best.get(r["engine"])
        if cur is None or (ok(r) and (not ok(cur) or r["samples_s"] > cur["samples_s"])):
            best[r["engine"]] = r
    return best


def _target_cell(t: dict) -> str:
    if t["met"] is None:
        return "n/a"
    return f"{t['value']:.2f} {'met' if t['met'] else '**not met**'}"


def markdown(result: dict, images: list[str]) -> str:
    m, v, a, summ = result["machine"], result["versions"], result["args"], result["summary"]
    names = list(result["datasets"])
    engines = [e for e in LABELS if any(r["engine"] == e for r in result["rows"])]
    L = [HEADING, "", BEGIN, "",
         "<!-- generated by bench/suite/run.py (scripts/bench.sh); edits here are overwritten -->", "",
         f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['system']}. Software: Python"
         f" {v['python']}, insitubatch {v['insitubatch']}, zarr {v['zarr']}, numpy {v['numpy']}, torch {v['torch']},"
         f" xarray {v['xarray']}, xbatcher {v['xbatcher']}, dask {v['dask']}; original insitubatch"
         f" {v.get('original_insitubatch') or 'not run'}"
         + (f" (Python {v['original_python']}, zarr {v['original_zarr']})" if v.get("original_python") else "") + ".",
         "", f"Command: `{result['command']}` ({a['samples']} samples of {a['field']} float32 per dataset, batch"
         f" {a['batch_size']}, `block_chunks` {a['block_chunks']}, `max_inflight` {a['max_inflight']},"
         " warm rates are the"
         f" median of {a['epochs']} epochs after a warm-up epoch; DataLoader workers swept over {a['workers']};"
         f" decode threads {result['threads']}).", "",
         "Datasets (one float32 variable `t2m`, zstd level 1, identical values within a field size):", ""]
    L += [f"* `{n}`: {d['layout']} of {'x'.join(map(str, d['shape']))}" for n, d in result["datasets"].items()]

    L += ["", "### Warm samples/s (best worker count N for the swept peers)", "",
          "| dataset | " + " | ".join(LABELS[e] for e in engines) + " | ours MB/s | ours hit rate |",
          "|---" * (len(engines) + 3) + "|"]
    for n in names:
        b = _best_rows(result, n)
        L.append(f"| {n} | " + " | ".join(_cell(b.get(e)) for e in engines)
                 + f" | {_cell(b.get('ours'), 'mb_s')} | {_cell(b.get('ours'), 'hit_rate', '{:.2f}')} |")

    L += ["", "### Targets", "",
          "| dataset | " + " | ".join(f"{what} (target {'>=' if hi else '<='} {t})" for _, what, t, hi in TARGETS)
          + " |",
          "|---" * (len(TARGETS) + 1) + "|"]
    for n in names:
        L.append(f"| {n} | " + " | ".join(_target_cell(summ[n]["targets"][k]) for k, *_ in TARGETS) + " |")

    L += ["", "### Ratios: ours / each peer and ceiling (samples/s)", "",
          "| dataset | " + " | ".join(f"ours / {LABELS[e]}" for e in PEERS + CEILINGS) + " |",
          "|---" * (len(PEERS) + len(CEILINGS) + 1) + "|"]
    for n in names:
        L.append(f"| {n} | " + " | ".join(_f(summ[n]["ratios"][e], "{:.2f}") for e in PEERS + CEILINGS) + " |")

    L += ["", "### Time to first batch and peak RSS (cold process; swept peers at their best N)", "",
          "| dataset | " + " | ".join(f"{LABELS[e]} TTFB / RSS" for e in engines if e != "decode") + " |",
          "|---" * len(engines) + "|"]
    for n in names:
        b = _best_rows(result, n)
        cells = []
        for e in engines:
            if e == "decode":
                continue
            r = b.get(e)
            cells.append(_cell(r) if not ok(r) else f"{_f(r['ttfb_s'], '{:.2f}')} s / {r['peak_rss_mib']:.0f} MiB")
        L.append(f"| {n} | " + " | ".join(cells) + " |")

    L += ["", *[f"![{pathlib.Path(p).stem}]({p})" for p in images], "",
          "<details><summary>Every run (all worker counts)</summary>", "",
          "| dataset | engine | N | samples/s | MB/s | TTFB | peak RSS | epochs | sample check |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        n = "-" if r.get("workers") is None else r["workers"]
        if not ok(r):
            L.append(f"| {r['dataset']} | {r['engine']} | {n} | {r.get('skipped') or 'failed: ' + r.get('failed', '')}"
                     " | | | | | |")
            continue
        full = "" if r["full_epochs"] else " (capped)"
        L.append(f"| {r['dataset']} | {r['engine']} | {n} | {r['samples_s']:.0f} | {r['mb_s']:.0f} |"
                 f" {_f(r['ttfb_s'], '{:.2f} s')} | {r['peak_rss_mib']:.0f} MiB |"
                 f" {sum(e['epoch'] > 0 for e in r['epochs'])}{full} |"
                 f" {r['check']} |")
    L += ["", "</details>", "", NOTES.strip(), "", END, ""]
    return "\n".join(L)


NOTES = """
How it is measured (`bench/suite/`): every engine runs in its own fresh process on the same
local store, with the OS page cache warmed (every stored file read once) before each
process starts.

* **ours**: `ds.train` of `InSituDataset` (split_by_chunk with all chunks in train). Warm
  epochs keep the pool across epochs as training does (the hit rate is over those epochs);
  the ratio to the raw decode ceiling uses separate epochs run after `ds.clear_cache()`, in
  which every chunk is decoded again. **ours + torch**: the same through
  `DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)`.
* **original**: the pure-Python insitubatch 0.2.0 from PyPI in its own virtualenv
  (`.venv-orig`), through its public API on an `obstore_store("file://...")`, with the same
  batch size, `block_chunks` and `max_inflight`.
* **xbatcher**: `BatchGenerator(xarray.open_zarr(...)["t2m"], input_dims={time: 1, lat: H,
  lon: W})` (one sample per item) in xbatcher's torch `MapDataset`, batched by
  `DataLoader(batch_size=32, shuffle=True, num_workers=N)`: a per-sample shuffle by the
  sampler, with dask loading each item. **map-style**: a Dataset whose `__getitem__(i)` is
  `zarr_array[i]`, same DataLoader. Workers (N > 0) are persistent and started the
  platform's default way (fork on Linux; zarr-python resets its event loop in a forked child;
  `--mp-context` changes it).
* **naive**: a Python loop reading `zarr_array[i]` per index of a shuffled permutation and
  stacking batches; each epoch stops after a time budget and the rate is over what it read.
  With `--peer-budget S` the DataLoader peers' epochs stop after S seconds the same way
  (marked "capped" under "Every run").
* **in-memory ceiling**: the whole array preloaded into numpy (counted in its TTFB), then
  each shuffled batch gathered with `np.take(..., out=)` into one preallocated buffer.
* **raw decode ceiling**: every stored zstd frame (inner chunks cut out of the shards by the
  shard index for `shard16`), already in memory, decoded with `ZSTD_decompressDCtx` by as
  many threads as the machine has cores; best of the repeats; no loader, pool or gather.
* **TTFB**: from the parent's start of the process to the first batch in it (interpreter
  start, imports, store open, worker start-up included).
* **peak RSS**: the largest sum of the resident sets of the engine process and all its
  descendants (DataLoader workers), sampled every 20 ms from outside, or the
  engine's own `VmHWM` if larger. Pages shared between processes count once per process.
* Every epoch is checked: each sample exactly once (by the sample indices where the engine
  returns them, else by count); the naive loop's capped epochs are checked for no sample twice.
"""


def update_doc(doc: pathlib.Path, section: str) -> None:
    """Replaces the generated section (heading through END) or appends it; nothing else."""
    text = doc.read_text()
    pat = re.compile(re.escape(HEADING) + r"\s*\n\s*" + re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", re.S)
    if pat.search(text):
        text = pat.sub(lambda _: section, text, count=1)
    elif BEGIN in text and END in text:
        i, j = text.index(BEGIN), text.index(END) + len(END)
        text = text[:i] + section.split("\n", 2)[2].rstrip("\n") + text[j:]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)


# -- plots ------------------------------------------------------------------------------------
def _finish(plt, fig, ax, x, names, ylabel: str, title: str, path: pathlib.Path) -> pathlib.Path:
    """Labels one bar chart (log y, legend beside it), saves it to ``path`` and closes it."""
    ax.set_xticks(x, names)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plots(result: dict, img: pathlib.Path) -> list[pathlib.Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    img.mkdir(parents=True, exist_ok=True)
    names = list(result["datasets"])
    engines = [e for e in LABELS if any(r["engine"] == e and ok(r) for r in result["rows"])]
    out = []

    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(names) + 5), 4.5))
    width = 0.8 / max(1, len(engines))
    x = np.arange(len(names))
    for k, e in enumerate(engines):
        vals = [(_best_rows(result, n).get(e) or {}).get("samples_s") or np.nan for n in names]
        ax.bar(x + (k - (len(engines) - 1) / 2) * width, vals, width, label=LABELS[e])
    out.append(_finish(plt, fig, ax, x, names, "samples/s (warm; log scale)",
                       "Warm throughput (swept peers at their best worker count)", img / "suite_rates.png"))

    summ = result["summary"]
    keys = [("original", "/ original", 1.5), ("xbatcher", "/ xbatcher", 1.0), ("mapstyle", "/ map-style", 1.0),
            ("decode", "/ raw decode", 0.9), ("inmem", "/ in-memory", None)]
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(names) + 5), 4.5))
    width = 0.8 / len(keys)
    for k, (e, label, target) in enumerate(keys):
        vals = [summ[n]["ratios"].get(e) or np.nan for n in names]
        ax.bar(x + (k - (len(keys) - 1) / 2) * width, vals, width, label=f"ours {label}")
        if target:  # a black dash across this bar: the target it must reach
            pos = x + (k - (len(keys) - 1) / 2) * width
            ax.hlines([target] * len(x), pos - width / 2, pos + width / 2, colors="black", linestyles="dashed",
                      linewidth=1.5, zorder=3)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    out.append(_finish(plt, fig, ax, x, names, "ratio of samples/s (log scale)",
                       "ours / each peer and ceiling (black dashes: the targets)", img / "suite_ratios.png"))
    return out
