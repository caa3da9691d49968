"""The suite's stores, written once by zarr-python into bench/data/suite.

Every layout holds one float32 variable ``t2m`` (dims time, lat, lon) compressed with zstd
level 1. Values are a smooth field plus Gaussian noise rounded to 0.1 (so they compress like
a real temperature), generated in 64-sample blocks from a per-block seed: every layout of
the same field size holds identical values whatever its chunking.

* ``era5_c{1,2,4,8,16,32}`` -- chunks (spc, H, W): one stored chunk holds spc whole samples;
* ``fat_c16``  -- field (2H-1, 2W) (361 x 720 by default), chunks (16, H, W): each sample is
  split over four inner chunks, the edge ones padded;
* ``shard16``  -- zarr v3 sharding: shards (16, H, W) of inner chunks (1, H, W), zstd inside.

A store carries a stamp (``suite.json``) of the parameters it was written with; a store whose
stamp matches is reused, any other is rewritten.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import struct
from dataclasses import asdict, dataclass

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "suite"
VAR = "t2m"
BLOCK = 64  # samples generated per seed: independent of the chunking, so values match
FORMAT = 1  # bump when the generator's values change


@dataclass(frozen=True)
class Spec:
    name: str
    samples: int
    field: tuple[int, int]
    chunks: tuple[int, int, int]  # the inner (or only) chunk shape
    shards: tuple[int, int, int] | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.samples, *self.field)

    @property
    def sample_bytes(self) -> int:
        return self.field[0] * self.field[1] * 4

    @property
    def layout(self) -> str:
        c = "x".join(map(str, self.chunks))
        return f"shards {'x'.join(map(str, self.shards))}, inner {c}" if self.shards else f"chunks {c}"

    def path(self, root: pathlib.Path = DATA) -> pathlib.Path:
        return root / f"{self.name}_{self.samples}_{self.field[0]}x{self.field[1]}.zarr"


ERA5_SPC = (1, 2, 4, 8, 16, 32)


def all_specs(samples: int, field: tuple[int, int]) -> dict[str, Spec]:
    h, w = field
    out = {f"era5_c{s}": Spec(f"era5_c{s}", samples, field, (s, h, w)) for s in ERA5_SPC}
    out["fat_c16"] = Spec("fat_c16", samples, (2 * h - 1, 2 * w), (16, h, w))
    out["shard16"] = Spec("shard16", samples, field, (1, h, w), (16, h, w))
    return out


def _stamp(spec: Spec) -> dict:
    return {"format": FORMAT, **asdict(spec)}


def values(field: tuple[int, int], start: int, stop: int) -> np.ndarray:
    """Samples [start, stop) of the field, identical for every chunking (per-block seeds)."""
    y, x = np.meshgrid(np.linspace(0, np.pi, field[0]), np.linspace(0, 2 * np.pi, field[1]), indexing="ij")
    base = (250 + 40 * np.sin(y) * np.cos(x)).astype("f4")
    out = np.empty((stop - start, *field), dtype="f4")
    for b in range(start // BLOCK, (stop - 1) // BLOCK + 1):
        b0, b1 = b * BLOCK, (b + 1) * BLOCK
        noise = np.random.default_rng([FORMAT, b]).normal(0, 2, size=(BLOCK, *field)).astype("f4")
        lo, hi = max(start, b0), min(stop, b1)
        out[lo - start:hi - start] = np.round(base + noise[lo - b0:hi - b0], 1)
    return out


def ensure(spec: Spec, root: pathlib.Path = DATA) -> pathlib.Path:
    """The store for ``spec``, written unless a matching one exists."""
    import zarr
    from zarr.codecs import ZstdCodec

    path = spec.path(root)
    stamp = path / "suite.json"
    if stamp.exists() and json.loads(stamp.read_text()) == _stamp(spec):
        return path
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    group = zarr.open_group(zarr.storage.LocalStore(path), mode="w", zarr_format=3)
    arr = group.create_array(VAR, shape=spec.shape, chunks=spec.chunks, shards=spec.shards, dtype="float32",
                             compressors=[ZstdCodec(level=1)], fill_value=0.0,
                             dimension_names=["time", "lat", "lon"])
    # Writes aligned to whole stored chunks/shards and to the value blocks.
    outer = (spec.shards or spec.chunks)[0]
    step = max(outer, BLOCK) // outer * outer
    for start in range(0, spec.samples, step):
        stop = min(spec.samples, start + step)
        arr[start:stop] = values(spec.field, start, stop)
    stamp.write_text(json.dumps(_stamp(spec)))
    return path


def chunk_files(path: pathlib.Path) -> list[str]:
    """Every stored chunk (or shard) file of the variable."""
    root = path / VAR / "c"
    return sorted(str(p) for p in root.rglob("*") if p.is_file())


def stored_bytes(path: pathlib.Path) -> int:
    return sum(os.path.getsize(f) for f in chunk_files(path))


def warm_page_cache(path: pathlib.Path) -> None:
    """Reads every stored byte once, so every engine starts from a warm OS page cache."""
    for f in chunk_files(path):
        with open(f, "rb") as fh:
            while fh.read(1 << 20):
                pass


def _shard_index_layout(meta: dict) -> tuple[int, int, bool]:
    """(inner chunks per shard, index at end?, crc32c on the index?) from zarr.json."""
    codec = next(c for c in meta["codecs"] if c["name"] == "sharding_indexed")
    cfg = codec["configuration"]
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
    n = int(np.prod([s // c for s, c in zip(shard, cfg["chunk_shape"])]))
    inner = [c["name"] for c in cfg["codecs"]]
    if inner[-1] != "zstd" or any(c not in ("bytes", "zstd") for c in inner):
        raise ValueError(f"ceiling: inner codecs {inner} are not a plain zstd chain")
    index_codecs = [c["name"] for c in cfg.get("index_codecs", [])]
    at_end = cfg.get("index_location", "end") == "end"
    return n, at_end, "crc32c" in index_codecs


def ceiling_frames(spec: Spec, path: pathlib.Path, tmp: pathlib.Path) -> tuple[list[str], int]:
    """The zstd frames the raw decode ceiling decodes, one file each, and their decoded size.

    Plain stores: the chunk files themselves. Sharded stores: each shard's inner frames,
    cut out by its index (16 bytes -- offset, nbytes as little-endian uint64 -- per inner
    chunk, plus 4 bytes of crc32c when the index carries one) into files under ``tmp``.
    """
    decoded = int(np.prod(spec.chunks)) * 4
    files = chunk_files(path)
    if spec.shards is None:
        return files, decoded
    meta = json.loads((path / VAR / "zarr.json").read_text())
    n, at_end, crc = _shard_index_layout(meta)
    index_len = 16 * n + (4 if crc else 0)
    out = []
    tmp.mkdir(parents=True, exist_ok=True)
    for k, f in enumerate(files):
        blob = pathlib.Path(f).read_bytes()
        index = blob[-index_len:] if at_end else blob[:index_len]
        for i in range(n):
            offset, nbytes = struct.unpack_from("<QQ", index, 16 * i)
            if offset == nbytes == 2**64 - 1:  # an empty inner chunk: nothing stored
                continue
            name = tmp / f"{k}_{i}.zst"
            name.write_bytes(blob[offset:offset + nbytes])
            out.append(str(name))
    return out, decoded
