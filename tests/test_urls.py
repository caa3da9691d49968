"""One URL scheme table and one bucket-prefix rule for both packages (insitubatch.urls):
the store dispatch, reference targets and planfetch's cache and index all read them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import insitubatch as ib
import planfetch as pf
from insitubatch import urls


def _refs(target):
    zarray = {"shape": [4], "chunks": [4], "dtype": "<u4", "compressor": None, "fill_value": 0, "filters": None,
              "order": "C", "zarr_format": 2}
    return {"version": 1, "refs": {".zgroup": '{"zarr_format": 2}', "v/.zarray": json.dumps(zarray),
                                   "v/0": [target, 0, 16]}}


@pytest.mark.parametrize("scheme", sorted(s for s, kind in urls.SCHEMES.items() if kind == "az"))
def test_every_azure_scheme_is_a_store_and_a_reference_target(scheme):
    """store() and reference targets read one table: adl:// was a store but not a target."""
    options = dict(account_name="acct", skip_signature=True)
    assert isinstance(ib.store(f"{scheme}://cont/prefix", **options), ib._ext.AzureStore)
    assert ib.reference_store(_refs(f"{scheme}://cont/file.bin"), **options) is not None


def test_unknown_schemes_are_refused_alike():
    with pytest.raises(ib.UnsupportedError, match="'ftp' is not supported"):
        ib.store("ftp://host/x")
    with pytest.raises(ib.UnsupportedError, match="scheme 'ftp' is not supported"):
        ib.reference_store(_refs("ftp://host/file.bin"))
    with pytest.raises(ib.UnsupportedError, match="scheme 'memory' is not supported"):
        ib.reference_store(_refs("memory://host/file.bin"))


def test_the_bucket_prefix_is_the_cores_rule():
    assert urls.bucket_prefix("s3://b/k/x.jpg") == "s3://b/"
    assert urls.bucket_prefix("file:///data/k/x.jpg") == "file:///"
    for bad in ("s3://b", "/data/x", "file:///"):
        with pytest.raises(ib.InvalidArgumentError):
            urls.bucket_prefix(bad)


def test_a_packed_index_of_local_files_is_read_through_the_cache(tmp_path):
    """planfetch's cache took file:/// URIs, its packed index refused them (two rules)."""
    files = []
    for i in range(3):
        path = tmp_path / "objects" / f"d{i}" / f"o{i}.bin"
        path.parent.mkdir(parents=True)
        path.write_bytes(bytes([i]) * (i + 5))
        files.append(path)
    index = tmp_path / "index.csv"
    index.write_text("s3_uri,label\n" + "".join(f"file://{p},{i}\n" for i, p in enumerate(files)))
    uris, labels = pf.load_index_csv(index, pack_uris=True)
    assert uris.prefix == "file:///" and list(uris) == [f"file://{p}" for p in files]
    with pf.SharedDiskCache(tmp_path / "cache") as cache:
        for uri, path in zip(uris, files):
            assert open(cache.ensure_local(uri), "rb").read() == path.read_bytes()
    np.testing.assert_array_equal(labels, [0, 1, 2])
