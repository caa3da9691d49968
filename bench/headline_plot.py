"""The headline plot of docs/benchmarks.md (and of the home page): how far ahead of each
peer we are, one bar per row of the page's headline table.

The table is the source: its rows are between ``<!-- headline:begin -->`` and
``<!-- headline:end -->`` in docs/benchmarks.md, each with where it was measured, the
measure, our figure, the peer, the peer's figure, "ours ahead" (ours / peer, or peer / ours
where lower is better, so above 1 always means ours is better) and the section the figures
come from. Update a row (a new run, a new peer) and run this again:

    .venv/bin/python bench/headline_plot.py [--doc docs/benchmarks.md] [--png docs/img/headline.png]

``--check`` only parses the table and checks each "ours ahead" against the two figures.
Needs matplotlib (requirements/bench.txt) to draw.
"""

from __future__ import annotations

import argparse
import pathlib
import re
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"
COLOURS = {"local": "#4C78A8", "first batch": "#F58518", "cloud": "#54A24B"}


@dataclass(frozen=True)
class Row:
    where: str  # "local", "first batch" or "cloud"
    measure: str
    ours: float
    peer: str
    theirs: float
    ahead: float  # as the table states it
    lower_is_better: bool
    source: str

    @property
    def computed(self) -> float:
        return self.theirs / self.ours if self.lower_is_better else self.ours / self.theirs


def _number(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", cell.replace(",", "")))


def parse(doc: pathlib.Path) -> list[Row]:
    """The headline table's rows; a row whose "ours ahead" disagrees with its figures by
    more than rounding is a ValueError naming it."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{doc}: no headline table between {BEGIN} and {END}")
    table = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or cells[0] in ("where", "") or set(cells[0]) <= set("-: "):
            continue
        where, measure, ours, peer, theirs, ahead, source = cells
        where = where.strip("*")
        if where not in COLOURS:
            raise ValueError(f"headline row {line!r}: 'where' must be one of {sorted(COLOURS)}")
        row = Row(where, measure, _number(ours), peer, _number(theirs), _number(ahead),
                  "lower is better" in measure, source)
        if abs(row.computed / row.ahead - 1) > 0.01:
            raise ValueError(f"headline row {line!r}: ours ahead {row.ahead} but the figures give {row.computed:.2f}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{doc}: the headline table has no rows")
    return rows


def draw(rows: list[Row], png: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.4))
    labels = [f"{r.peer}: {re.split(r'[,(]', r.measure)[0].strip()}" for r in rows]
    y = range(len(rows))
    ax.barh(list(y), [r.ahead for r in rows], color=[COLOURS[r.where] for r in rows], height=0.7)
    for k, r in enumerate(rows):
        ax.text(r.ahead * 1.04, k, f"{r.ahead:g}x", va="center", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xticks([1, 2, 5, 10, 20, 50], ["1", "2", "5", "10", "20", "50"])
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0.8, max(r.ahead for r in rows) * 2)
    ax.set_xlabel("ours ahead of the peer (x, log scale; 1 = level, right of it = ours better)", fontsize=8)
    ax.set_title("insitubatch against each peer (docs/benchmarks.md, headline table)", fontsize=9)
    ax.legend(handles=[Patch(color=c, label=w) for w, c in COLOURS.items()], fontsize=7, loc="lower right")
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.subplots_adjust(left=0.4)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--doc", type=pathlib.Path, default=ROOT / "docs" / "benchmarks.md")
    p.add_argument("--png", type=pathlib.Path, default=ROOT / "docs" / "img" / "headline.png")
    p.add_argument("--check", action="store_true", help="parse and check the table only")
    args = p.parse_args()
    rows = parse(args.doc)
    if not args.check:
        draw(rows, args.png)
        print(f"wrote {args.png} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
