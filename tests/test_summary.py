"""describe() / print_summary() arithmetic and layout.

summary.py is arithmetic over geometry (the sizing rules are the engine's, through the native
extension); these tests load it and the real ArrayGeometry from the source tree, without the
package __init__, under a private package name whose ``_ext`` is the installed extension.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

_SRC = Path(__file__).resolve().parents[1] / "python" / "insitubatch"
_PKG = "_insitubatch_summary_under_test"


def _load(name: str):
    full = f"{_PKG}.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.util.spec_from_file_location(full, _SRC / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    spec.loader.exec_module(module)
    return module


def _load_package():
    if _PKG not in sys.modules:
        pkg = types.ModuleType(_PKG)
        pkg.__path__ = []  # nothing is found on disk: every submodule is placed explicitly
        sys.modules[_PKG] = pkg
        # summary's sizing is the engine's: the real extension stands in for the package's
        import insitubatch._ext

        sys.modules[f"{_PKG}._ext"] = insitubatch._ext
    _load("errors")
    return _load("geometry"), _load("summary")


geometry_mod, S = _load_package()
ArrayGeometry = geometry_mod.ArrayGeometry
OutputField, SummaryConfig = S.OutputField, S.SummaryConfig

MiB = 1 << 20


def cfg(**kw):
    base = dict(batch_size=32, block_chunks=16, block_chunks_requested=16, max_inflight=32, prefetch_depth=2,
                shuffle=True, seed=0, cache_budget_bytes=None, samples_per_chunk=16,
                split_chunks={"train": 32, "val": 4, "test": 4}, shuffle_quality=0.99)
    base.update(kw)
    return SummaryConfig(**base)


def seed_geoms():
    return {"t2m": ArrayGeometry("t2m", (6000, 721, 1440), (16, 721, 1440), np.float32)}


SEED_EXPECTED = """\
variables
  t2m
    6000x721x1440 float32   chunks 16x721x1440   sample axis 0
    375 chunks of 16 sample(s)   field 721x1440 in 1 stored chunk(s) of 721x1440
    stored chunk 63.4 MiB   resident per chunk 63.4 MiB   gather run 4.0 MiB

configuration (resolved)
  batch_size 32   block_chunks 16   max_inflight 32   prefetch_depth 2
  shuffle on (seed 0, quality 0.99)   window no   shuffle pool 256 samples for a 32-sample batch
  splits (chunks)  train 32  val 4  test 4
  cache backing heap

memory, accounted, for 1 concurrent iteration(s)
  residency       1.98 GiB   budget (automatic: the working-set floor)
  in flight       1.98 GiB   max_inflight x stored chunk
  batch queue    380.2 MiB   (prefetch_depth + 1) x batch
  accounted       4.33 GiB   sum of the rows above
  ESTIMATED       5.41 GiB   accounted x 1.25 -- plan for this
  [... two paragraphs on allocator retention, and on sizing concurrent iterations ...]

notes
  [t2m] one stored chunk per outer chunk at 63.4 MiB: concurrency and memory are coupled here,
      so each of max_inflight=32 slots costs a whole chunk. Inner-chunk the field to separate
      them."""

PLACEHOLDER = "  [... two paragraphs on allocator retention, and on sizing concurrent iterations ...]"


def _split_footnotes(text: str) -> tuple[list[str], list[str]]:
    """(lines with the footnote block replaced by the seed's placeholder, the footnote lines)."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("  ESTIMATED")) + 1
    stop = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[:start] + [PLACEHOLDER] + lines[stop:], lines[start:stop]


# -- the seed example ------------------------------------------------------------------------------
def test_seed_example_reproduces_line_for_line():
    report = S.describe(seed_geoms(), None, cfg())
    text = S.format_summary(report)
    lines, footnotes = _split_footnotes(text)
    assert lines == SEED_EXPECTED.split("\n")
    joined = " ".join(line.strip() for line in footnotes)
    assert "1.25" in joined and "allocator" in joined
    assert "ONE iteration" in joined and "zip(ds.train, ds.val)" in joined
    assert "describe(iterations=N)" in joined and "cache_budget_bytes" in joined
    assert all(len(line) <= S.WRAP_WIDTH for line in text.split("\n"))


def test_seed_example_numbers():
    report = S.describe(seed_geoms(), None, cfg())
    v = report["variables"]["t2m"]
    assert v["stored_chunk_bytes"] == 66_447_360 == v["slot_bytes"] == v["logical_chunk_bytes"]
    assert v["gather_run_bytes"] == 4_152_960
    assert v["n_chunks"] == 375 and v["stored_chunks_per_chunk"] == 1 and v["ragged_multiplier"] == 1.0
    m = report["memory"]
    assert m["working_set_bytes"] == m["residency_bytes"] == 2 * 16 * 66_447_360
    assert m["inflight_bytes"] == 32 * 66_447_360
    assert m["queue_bytes"] == 3 * 32 * 721 * 1440 * 4
    assert m["scratch_bytes"] == 0
    assert m["accounted_bytes"] == m["residency_bytes"] + m["inflight_bytes"] + m["queue_bytes"]
    assert m["estimated_peak_bytes"] == int(m["accounted_bytes"] * 1.25)
    assert m["budget_is_automatic"] is True
    assert [n["code"] for n in report["notes"]] == ["single-inner-fat-chunk"]
    assert report["notes"][0]["severity"] == "note" and report["notes"][0]["subject"] == "t2m"


def test_describe_structure():
    report = S.describe(seed_geoms(), None, cfg())
    assert set(report) == {"variables", "config", "memory", "notes", "footnotes", "shuffle_quality"}
    assert report["shuffle_quality"] == report["config"]["shuffle_quality"] == 0.99
    assert set(report["variables"]["t2m"]) == {
        "label", "path", "dtype", "shape", "chunks", "sample_axis", "sample_chunk_size", "n_samples",
        "n_chunks", "offset", "inner_shape", "inner_chunks", "stored_chunks_per_chunk", "stored_chunk_bytes",
        "logical_chunk_bytes", "slot_bytes", "ragged_multiplier", "gather_run_bytes", "output_inner_shape",
        "output_dtype"}
    c = report["config"]
    for key in ("batch_size", "block_chunks", "block_chunks_requested", "max_inflight", "prefetch_depth",
                "shuffle", "seed", "cache_budget_bytes", "cache_dir", "persist", "readonly_cache",
                "chunk_transforms", "batch_transforms", "assembles", "windowed", "offsets",
                "samples_per_chunk",
                "n_chunks", "split_chunks", "shuffle_quality"):
        assert key in c, key
    assert c["cache_budget_bytes"] == report["memory"]["working_set_bytes"]
    assert c["split_chunks"] == {"train": 32, "val": 4, "test": 4}
    assert c["n_chunks"] == {"t2m": 375} and c["offsets"] == {"t2m": 0} and c["windowed"] is False
    for key in ("residency_bytes", "inflight_bytes", "queue_bytes", "scratch_bytes", "accounted_bytes",
                "estimated_peak_bytes", "budget_is_automatic", "working_set_bytes"):
        assert key in report["memory"], key
    assert all(set(n) == {"code", "severity", "subject", "message"} for n in report["notes"])


# -- formatting ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (MiB, "1.0 MiB"),
    (MiB - 1, "1024.0 KiB"), (1 << 30, "1.00 GiB"), (66_447_360, "63.4 MiB"), (4_152_960, "4.0 MiB"),
])
def test_format_bytes(n, text):
    assert S.format_bytes(n) == text


def test_note_wrapping_rule_is_general():
    geoms = {"a_long_variable_name": ArrayGeometry("p", (64, 721, 1440), (4, 721, 1440), np.float64)}
    text = S.format_summary(S.describe(geoms, None, cfg(samples_per_chunk=4, max_inflight=128)))
    notes = text.split("\nnotes\n")[1].split("\n")
    assert notes[0].startswith("  [a_long_variable_name] one stored chunk")
    assert all(line.startswith("      ") and not line.startswith("       ") for line in notes[1:])
    assert max(len(line) for line in notes) <= 96
    assert " ".join(line.strip() for line in notes).endswith("Inner-chunk the field to separate them.")


# -- gather run ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, chunks, axis, expected", [
    ((8, 721, 1440), (1, 721, 1440), 0, 721 * 1440 * 4),
    ((8, 721, 1440), (1, 180, 1440), 0, 180 * 1440 * 4),
    ((8, 721, 1440), (1, 180, 360), 0, 360 * 4),
    ((8, 100, 100, 100), (1, 10, 100, 100), 0, 10 * 100 * 100 * 4),
    ((721, 1440, 8), (180, 1440, 1), 2, 180 * 1440 * 4),  # follows the sample axis, not axis 0
    ((721, 8, 1440), (721, 2, 1440), 1, 721 * 1440 * 4),
])
def test_gather_run_bytes(shape, chunks, axis, expected):
    geoms = {"v": ArrayGeometry("v", shape, chunks, np.float32, sample_axis=axis)}
    spc = chunks[axis]
    report = S.describe(geoms, None, cfg(samples_per_chunk=spc, split_chunks={"train": 1}))
    assert report["variables"]["v"]["gather_run_bytes"] == expected


# -- notes -----------------------------------------------------------------------------------------
def _notes(geoms, **kw):
    report = S.describe(geoms, None, cfg(**kw))
    return report, {n["code"]: n for n in report["notes"]}


def test_short_gather_run_note():
    geoms = {"z": ArrayGeometry("z", (8, 721, 1440), (1, 180, 360), np.float16)}
    report, notes = _notes(geoms, samples_per_chunk=1, split_chunks={"train": 8})
    assert report["variables"]["z"]["gather_run_bytes"] == 360 * 2
    note = notes["short-gather-run"]
    assert note["severity"] == "warn" and note["subject"] == "z"
    assert "(1,k,W)" in note["message"] and "720 B" in note["message"]
    text = S.format_summary(report)
    assert "\nwarnings\n  [z] gather copies" in text
    assert text.index("\nwarnings\n") < text.index("\nnotes\n")  # warnings before notes
    assert "single-inner-fat-chunk" not in notes  # 20 stored chunks per outer chunk
    # the same tiling at 4 bytes per item runs 1440 B: no warning
    geoms = {"z": ArrayGeometry("z", (8, 721, 1440), (1, 180, 360), np.float32)}
    assert "short-gather-run" not in _notes(geoms, samples_per_chunk=1, split_chunks={"train": 8})[1]


def test_ragged_grid_note():
    geoms = {"r": ArrayGeometry("r", (8, 721, 1440), (1, 180, 1440), np.float32)}
    report, notes = _notes(geoms, samples_per_chunk=1, split_chunks={"train": 8})
    v = report["variables"]["r"]
    assert v["stored_chunks_per_chunk"] == 5
    assert v["slot_bytes"] == 5 * 180 * 1440 * 4 and v["logical_chunk_bytes"] == 721 * 1440 * 4
    assert v["ragged_multiplier"] == pytest.approx(900 / 721)
    note = notes["ragged-grid"]
    assert note["severity"] == "note" and "residency is 1.248x the logical chunk" in note["message"]
    assert "padding" in note["message"]
    assert "   ragged 1.248x   gather run 1012.5 KiB" in S.format_summary(report)
    # an exact grid is not ragged
    geoms = {"r": ArrayGeometry("r", (8, 720, 1440), (1, 180, 1440), np.float32)}
    report, notes = _notes(geoms, samples_per_chunk=1, split_chunks={"train": 8})
    assert "ragged-grid" not in notes and "ragged" not in S.format_summary(report)


def test_single_inner_fat_chunk_any_size():
    geoms = {"tiny": ArrayGeometry("tiny", (100, 4), (10, 4), np.uint8)}
    _, notes = _notes(geoms, samples_per_chunk=10, max_inflight=7, split_chunks={"train": 10})
    msg = notes["single-inner-fat-chunk"]["message"]
    assert msg.startswith("one stored chunk per outer chunk at 40 B:") and "max_inflight=7" in msg


def test_block_chunks_widened_note_and_line():
    geoms = {"x": ArrayGeometry("x", (1000, 10, 10), (1, 10, 10), np.float32)}
    resolved = S.resolve_block_chunks(16, 64, 1, 1000)
    assert resolved == 64
    report, notes = _notes(geoms, batch_size=64, block_chunks=resolved, block_chunks_requested=16,
                           samples_per_chunk=1, split_chunks={"train": 800, "val": 100, "test": 100})
    note = notes["block-chunks-widened"]
    assert note["subject"] == "config" and note["severity"] == "note"
    assert report["notes"][-1] is note  # global notes follow per-variable ones
    text = S.format_summary(report)
    assert "  batch_size 64   block_chunks 64 (raised from 16)   max_inflight 32" in text
    assert "shuffle pool 64 samples for a 64-sample batch" in text
    assert report["config"]["block_chunks_requested"] == 16 and report["config"]["block_chunks"] == 64
    assert "block-chunks-widened" not in _notes(seed_geoms())[1]


@pytest.mark.parametrize("requested, batch, spc, n_chunks, expected", [
    (16, 32, 16, 40, 16),   # already wide enough
    (1, 32, 16, 40, 2),     # ceil(32/16)
    (1, 33, 16, 40, 3),
    (4, 64, 1, 10, 10),     # capped at the chunk count
    (0, 1, 16, 0, 1),       # at least 1
    (30, 64, 1, 10, 30),    # never narrowed
])
def test_resolve_block_chunks(requested, batch, spc, n_chunks, expected):
    assert S.resolve_block_chunks(requested, batch, spc, n_chunks) == expected


# -- the floor -------------------------------------------------------------------------------------
def _small(spc=1, offset=0, path="v", dtype=np.float32):
    return ArrayGeometry(path, (100, 10, 10), (spc, 10, 10), dtype).shift(offset)


def _floor(geoms, *, spc=1, block=4, shuffle=False, n_train=50, **kw):
    return S.working_set_bytes(geoms, None, block_chunks=block, ref_spc=spc, shuffle=shuffle,
                               n_train_chunks=n_train, **kw)


def test_floor_unwindowed():
    slot = 400
    assert _floor({"a": _small()}) == 2 * 4 * slot
    assert _floor({"a": _small()}, shuffle=True) == 2 * 4 * slot  # no windowed raise
    assert _floor({"a": _small(), "b": _small(path="w", dtype=np.float64)}) == 2 * 4 * (slot + 2 * slot)


@pytest.mark.parametrize("lead", [1, 24])
def test_floor_windowed_spc1(lead):
    slot = 400
    geoms = {"x": _small(), "y": _small(offset=lead)}  # two labels aliasing one path
    assert _floor(geoms, shuffle=False) == 2 * 4 * (slot + slot)  # aligned offsets: k = 1 each
    # shuffled: raised to the train split plus the offset reach, the path counted once
    assert _floor(geoms, shuffle=True) == (50 + lead) * slot
    report = S.describe(geoms, None, cfg(block_chunks=4, block_chunks_requested=4, samples_per_chunk=1,
                                         split_chunks={"train": 50, "val": 25, "test": 25}))
    assert report["memory"]["working_set_bytes"] == (50 + lead) * slot
    assert report["config"]["windowed"] is True and report["config"]["offsets"] == {"x": 0, "y": lead}
    codes = [(n["code"], n["subject"]) for n in report["notes"]]  # one slot, one piece of advice each
    assert codes == [("short-gather-run", "x"), ("single-inner-fat-chunk", "x")]


def test_floor_windowed_unaligned_offsets():
    spc, slot = 4, 4 * 400
    geoms = {"x": _small(spc), "y": _small(spc, offset=1)}
    assert _floor(geoms, spc=spc) == 2 * 4 * (slot + 2 * slot)  # the unaligned label reads two chunks
    assert _floor(geoms, spc=spc, shuffle=True) == max(2 * 4 * 3 * slot, (50 + 1) * slot)
    geoms = {"x": _small(spc), "y": _small(spc, offset=24)}
    assert _floor(geoms, spc=spc) == 2 * 4 * 2 * slot
    assert _floor(geoms, spc=spc, shuffle=True, n_train=20) == (20 + 6) * slot


def test_floor_windowed_distinct_paths_each_counted():
    geoms = {"x": _small(), "y": _small(offset=1, path="w")}
    assert _floor(geoms, shuffle=True) == (50 + 1) * (400 + 400)


def test_floor_reread_spill_three_blocks():
    slot = 400
    plain = {"a": _small()}
    assert _floor(plain, reread_spill=True) == 3 * 4 * slot == _floor(plain) * 3 // 2
    windowed = {"x": _small(), "y": _small(offset=24)}
    # spill replaces the whole-split raise with the three-block floor
    assert _floor(windowed, shuffle=True, reread_spill=True) == 3 * 4 * 2 * slot
    report = S.describe(windowed, None, cfg(block_chunks=4, block_chunks_requested=4, samples_per_chunk=1,
                                            persist=True, cache_dir="/c"), reread_spill=True)
    assert report["memory"]["working_set_bytes"] == 3 * 4 * 2 * slot and report["config"]["reread_spill"]


def test_floor_non_uniform_spc():
    raw = ArrayGeometry("raw", (60, 8, 8), (1, 8, 8), np.float32)    # slot 256
    mask = ArrayGeometry("mask", (60, 8, 8), (30, 8, 8), np.uint8)   # slot 1920
    geoms = {"raw": raw, "mask": mask}
    window = 2 * 4 * 1
    unshuffled = (math.ceil(window / 1) + 1) * 256 + (math.ceil(window / 30) + 1) * 1920
    assert _floor(geoms, spc=1, block=4, n_train=40) == unshuffled == 9 * 256 + 2 * 1920
    shuffled = (40 + 1) * 256 + (math.ceil(40 / 30) + 1) * 1920
    assert _floor(geoms, spc=1, block=4, n_train=40, shuffle=True) == max(unshuffled, shuffled)
    # uniform spc that differs from the anchor grid takes the non-uniform rule too
    fine = {"a": _small(spc=2)}
    assert _floor(fine, spc=4, block=4) == (math.ceil(2 * 4 * 4 / 2) + 1) * 800


def test_slot_bytes_with_chunk_transforms():
    g = ArrayGeometry("g", (100, 64, 64), (4, 32, 32), np.float32)
    same = OutputField((64, 64), np.float32)
    assert S.slot_bytes(g, same, False) == S.slot_bytes(g, same, True) == g.chunk_bytes
    bigger = OutputField((128, 128), np.float64)
    assert S.slot_bytes(g, bigger, False) == g.chunk_bytes
    assert S.slot_bytes(g, bigger, True) == 4 * 128 * 128 * 8
    assert S.slot_bytes(g, OutputField((8, 8), np.float16), True) == g.chunk_bytes


def test_chunk_transform_report():
    g = ArrayGeometry("t2m", (100, 64, 64), (4, 32, 32), np.float32)
    outs = {"t2m": OutputField((128, 128), np.float16)}
    config = cfg(samples_per_chunk=4, split_chunks={"train": 25}, chunk_transforms=("regrid[t2m]",),
                 batch_transforms=("wind_speed",))
    report = S.describe({"t2m": g}, outs, config)
    v = report["variables"]["t2m"]
    assert v["slot_bytes"] == 4 * 128 * 128 * 2 and v["output_inner_shape"] == (128, 128)
    assert v["output_dtype"] == "float16" and v["logical_chunk_bytes"] == 4 * 128 * 128 * 2
    m = report["memory"]
    assert m["scratch_bytes"] == 4 * 32 * 32 * 4 * 4  # stored chunk x stored chunks per chunk
    assert m["queue_bytes"] == (3 + 2) * 32 * 128 * 128 * 2  # + 2 held by the batch transforms' thread
    assert m["inflight_bytes"] == 32 * 4 * 32 * 32 * 4
    assert m["accounted_bytes"] == sum(m[k] for k in ("residency_bytes", "inflight_bytes", "queue_bytes",
                                                       "scratch_bytes"))
    assert report["config"]["assembles"] is True
    text = S.format_summary(report)
    assert "    after chunk_transform: field 128x128 float16" in text
    assert "  chunk_transforms regrid[t2m]  (slot assembles)  batch_transforms wind_speed" in text
    assert "  scratch         64.0 KiB   chunk_transform assembly" in text


# -- budget, iterations ----------------------------------------------------------------------------
def test_explicit_budget_below_floor_raises():
    floor = 2 * 16 * 66_447_360
    with pytest.raises(ValueError) as info:
        S.describe(seed_geoms(), None, cfg(cache_budget_bytes=floor - 1))
    msg = str(info.value)
    assert str(floor) in msg and "1.98 GiB" in msg
    assert "cache_budget_bytes" in msg and "block_chunks=16" in msg and "1 variable" in msg
    with pytest.raises(ValueError, match=str(floor)):
        S.resolve_budget(10, floor, block_chunks=16, n_variables=3)
    assert S.resolve_budget(None, floor, block_chunks=16, n_variables=1) == floor
    assert S.resolve_budget(floor, floor, block_chunks=16, n_variables=1) == floor


def test_explicit_budget_above_floor():
    budget = 4 << 30
    report = S.describe(seed_geoms(), None, cfg(cache_budget_bytes=budget))
    m = report["memory"]
    assert m["residency_bytes"] == budget and m["budget_is_automatic"] is False
    assert m["working_set_bytes"] == 2 * 16 * 66_447_360
    assert report["config"]["cache_budget_bytes"] == budget
    assert "  residency       4.00 GiB   budget\n" in S.format_summary(report)


def test_iterations_double_residency_only():
    one = S.describe(seed_geoms(), None, cfg())
    two = S.describe(seed_geoms(), None, cfg(), iterations=2)
    m1, m2 = one["memory"], two["memory"]
    assert m2["residency_bytes"] == 2 * m1["residency_bytes"]
    for key in ("inflight_bytes", "queue_bytes", "scratch_bytes", "working_set_bytes"):
        assert m2[key] == m1[key]
    assert m2["budget_is_automatic"] is True
    assert m2["accounted_bytes"] == m1["accounted_bytes"] + m1["residency_bytes"]
    text = S.format_summary(two)
    assert "memory, accounted, for 2 concurrent iteration(s)" in text
    assert "ONE iteration" not in text
    assert str(m2["residency_bytes"]) in " ".join(two["footnotes"])


@pytest.mark.parametrize("bad", [0, -1])
def test_iterations_must_be_positive(bad):
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        S.describe(seed_geoms(), None, cfg(), iterations=bad)


# -- other layout details --------------------------------------------------------------------------
def test_split_with_zero_chunks_is_shown():
    report = S.describe(seed_geoms(), None, cfg(split_chunks={"train": 36, "val": 0, "test": 4}))
    assert "  splits (chunks)  train 36  val 0  test 4\n" in S.format_summary(report)


def test_window_label_line():
    g = ArrayGeometry("t2m", (6000, 721, 1440), (1, 721, 1440), np.float32)
    geoms = {"x": g, "t2m": g.shift(24), "prev": g.shift(-1)}
    report = S.describe(geoms, None, cfg(samples_per_chunk=1, split_chunks={"train": 10}))
    lines = S.format_summary(report).split("\n")
    assert "  x" in lines and "  t2m  window +24" in lines and "  prev  window -1" in lines
    assert "window yes" in lines[lines.index("configuration (resolved)") + 2]


def test_shuffle_off_and_cache_backings():
    report = S.describe(seed_geoms(), None, cfg(shuffle=False, shuffle_quality=None, cache_dir="/mnt/c",
                                                 persist=True))
    text = S.format_summary(report)
    assert "  shuffle off (seed 0, quality n/a)   window no" in text
    assert "  cache backing /mnt/c, persist\n" in text
    report = S.describe(seed_geoms(), None, cfg(cache_dir="/mnt/c", readonly_cache=True))
    assert "  cache backing /mnt/c, read-only\n" in S.format_summary(report)
    report = S.describe(seed_geoms(), None, cfg(cache_dir="/mnt/c"))
    assert "  cache backing /mnt/c\n" in S.format_summary(report)


def test_prefetch_depth_clamped():
    report = S.describe(seed_geoms(), None, cfg(prefetch_depth=0))
    assert report["config"]["prefetch_depth"] == 1
    assert report["memory"]["queue_bytes"] == 2 * 32 * 721 * 1440 * 4
