"""Writes tests/data/zarr2_categorize.zarr with zarr-python 2, the only writer of string
labels stored through numcodecs' Categorize(dtype=object) (zarr-python 3 neither writes
nor reads such arrays). The project's venv has zarr 3, so run it against zarr 2 installed
aside (zarr 2.18 needs numcodecs < 0.16):

    pip install --target /tmp/zarr2 --no-deps zarr==2.18.3 numcodecs==0.15.1 asciitree fasteners deprecated wrapt
    PYTHONPATH=/tmp/zarr2 .venv/bin/python tests/data/make_zarr2_categorize.py

zarr2_categorize_read.json holds what zarr-python 2 reads back from the store: the test's
oracle.
"""

import json
import pathlib
import shutil

import numcodecs
import numpy as np
import zarr

assert zarr.__version__.startswith("2."), zarr.__version__

OUT = pathlib.Path(__file__).resolve().parent / "zarr2_categorize.zarr"
LABELS = ["cat", "dog", "émeu", "東京"]
WORDS = ["cat", "dog", "émeu", "bee", "東京", "cat", ""]  # "bee" and "" are no label: code 0

values = np.array([WORDS[(i * 5) % 7] for i in range(37 * 3)], dtype=object).reshape(37, 3)
shutil.rmtree(OUT, ignore_errors=True)
group = zarr.open_group(str(OUT), mode="w")
labels = group.create_dataset("labels", shape=values.shape, chunks=(8, 3), dtype=object,
                              filters=[numcodecs.Categorize(LABELS, dtype=object, astype="u1")],
                              compressor=numcodecs.Zstd(level=3))
labels[...] = values
# Wider codes, no compressor, and chunks never written: those read as the fill value.
partial = group.create_dataset("labels_i2", shape=values.shape, chunks=(8, 2), dtype=object, fill_value="cat",
                               filters=[numcodecs.Categorize(LABELS, dtype=object, astype="<i2")], compressor=None)
partial[:16] = values[:16]
x = group.create_dataset("x", shape=values.shape, chunks=(8, 3), dtype="<f4", compressor=numcodecs.Zlib(level=1))
x[...] = np.arange(37 * 3, dtype="<f4").reshape(37, 3)
reread = zarr.open_group(str(OUT), mode="r")
read = {name: reread[name][...].tolist() for name in ("labels", "labels_i2")}
(OUT.parent / "zarr2_categorize_read.json").write_text(json.dumps(read, ensure_ascii=False) + "\n")
print(sorted(p.relative_to(OUT).as_posix() for p in OUT.rglob("*") if p.is_file()))
