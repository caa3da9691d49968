"""The engine benchmark, this checkout against an earlier revision or a built wheel, in
alternating runs.

engine_bench.py's ratios (ours / decode ceiling) move by tens of percent between runs on a
shared VM, so "did this change make the engine slower?" is answered only by running both
builds back to back, several times, on the same stores. This script builds `--rev` into a
wheel (a git worktree, the installed .venv's build tools), installs it into its own folder,
then alternates `engine_bench.py --runs R` between the installed package (this checkout, as
scripts/setup.sh built it) and the old one, and prints each row's median ratio for both.
`--wheel` compares a wheel (scripts/build_wheels.sh's: another compiler, C++ runtime and
codec builds) the same way, and also each side's absolute epoch speed and zstd ceiling:
the ceiling decodes with the build's own zstd, so the ratio alone would hide a slower codec.

    .venv/bin/python bench/engine_ab.py --rev 71bbd62 [--pairs 3] [--runs 3]
    .venv/bin/python bench/engine_ab.py --wheel build/wheelhouse/insitubatch-...-cp311-...whl

Writes bench/results/engine_ab.json. Building the old revision takes ~3 min on 2 vCPUs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


def resolve_commit(rev: str) -> str | None:
    """`rev`'s short commit id, None when git knows no such commit."""
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--short", f"{rev}^{{commit}}"], cwd=ROOT,
                           capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else None


def build_revision(commit: str) -> pathlib.Path:
    """`commit` built and installed into bench/results/ab-<commit>/site (reused when there)."""
    site = RESULTS / f"ab-{commit}" / "site"
    if (site / "insitubatch").is_dir():
        return site
    with tempfile.TemporaryDirectory() as tmp:
        tree, wheels = pathlib.Path(tmp) / "tree", pathlib.Path(tmp) / "wheels"
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(tree), commit], cwd=ROOT, check=True)
        try:
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", ".",
                            "-w", str(wheels)], cwd=tree, check=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                            *map(str, wheels.glob("*.whl"))], check=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    return site


def install_wheel(wheel: pathlib.Path) -> pathlib.Path:
    """`wheel` installed (without dependencies) into bench/results/ab-<wheel name>-<its hash>/site: a rebuilt
    wheel keeps its name, so the name alone would find the old build's files."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:12]
    site = RESULTS / f"ab-{wheel.name.removesuffix('.whl')}-{digest}" / "site"
    if not (site / "insitubatch").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                       check=True)
    return site


def one_run(runs: int, site: pathlib.Path | None) -> list[dict]:
    env = dict(os.environ)
    if site is not None:  # the old package shadows the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(HERE / "engine_bench.py"), "--runs", str(runs)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--rev", help="the earlier revision to compare against")
    which.add_argument("--wheel", type=pathlib.Path, help="a built wheel to compare against")
    p.add_argument("--pairs", type=int, default=3, help="alternating (this, old) engine_bench runs")
    p.add_argument("--runs", type=int, default=3, help="engine_bench --runs of each")
    args = p.parse_args(argv)
    if args.pairs < 1 or args.runs < 1:
        p.error(f"--pairs and --runs must be >= 1, got {args.pairs} and {args.runs}")
    if args.wheel is not None:
        if not args.wheel.is_file():
            p.error(f"--wheel {args.wheel}: no such file")
        site, label = install_wheel(args.wheel.resolve()), args.wheel.name
    else:
        commit = resolve_commit(args.rev)
        if commit is None:
            p.error(f"--rev {args.rev!r} names no commit in {ROOT}")
        site, label = build_revision(commit), args.rev
    runs: dict[tuple[int, int], dict[str, list[dict]]] = {}
    for _ in range(args.pairs):
        for side, where in (("this", None), ("old", site)):
            for row in one_run(args.runs, where):
                key = (row["samples_per_chunk"], row["threads"])
                runs.setdefault(key, {"this": [], "old": []})[side].append(row)

    def median(side: list[dict], field: str) -> float:
        return statistics.median(row[field] for row in side)

    rows = [{"samples_per_chunk": spc, "threads": t, "this": [x["ratio"] for x in r["this"]],
             "old": [x["ratio"] for x in r["old"]], "this_median": median(r["this"], "ratio"),
             "old_median": median(r["old"], "ratio"),
             "this_samples_s": median(r["this"], "ours_samples_s"), "old_samples_s": median(r["old"], "ours_samples_s"),
             "this_ceiling_samples_s": median(r["this"], "ceiling_samples_s"),
             "old_ceiling_samples_s": median(r["old"], "ceiling_samples_s")}
            for (spc, t), r in sorted(runs.items(), key=lambda kv: (kv[0][0], -kv[0][1]))]
    print(f"| samples/chunk | decode threads | ours / ceiling, this checkout (runs) | {label} (runs) |"
          " samples/s, this / other | zstd ceiling samples/s, this / other |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        this = ", ".join(f"{x:.2f}" for x in r["this"])
        old = ", ".join(f"{x:.2f}" for x in r["old"])
        print(f"| {r['samples_per_chunk']} | {r['threads']} | **{r['this_median']:.2f}** ({this})"
              f" | **{r['old_median']:.2f}** ({old})"
              f" | {r['this_samples_s']:.0f} / {r['old_samples_s']:.0f} = {r['this_samples_s'] / r['old_samples_s']:.2f}"
              f" | {r['this_ceiling_samples_s']:.0f} / {r['old_ceiling_samples_s']:.0f}"
              f" = {r['this_ceiling_samples_s'] / r['old_ceiling_samples_s']:.2f} |")
    result = {"rev": args.rev, "wheel": str(args.wheel) if args.wheel else None, "pairs": args.pairs,
              "runs": args.runs, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "engine_ab.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
