"""reference_store: kerchunk references (JSON v0/v1 with templates and gen, parquet) read
natively, checked against zarr-python reading the same references through fsspec's
ReferenceFileSystem; targets on local disk, HTTP and S3 (moto, signatures on); hostile
references refused with the key named."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import insitubatch as ib
from cloud_data import read_whole
from cloud_fixtures import BUCKET
from servers import RangeServer

h5py = pytest.importorskip("h5py")
kerchunk_hdf = pytest.importorskip("kerchunk.hdf")
fsspec = pytest.importorskip("fsspec")
zarr = pytest.importorskip("zarr")


def oracle(fo, name, **options):
    fs = fsspec.filesystem("reference", fo=fo, remote_protocol="file", asynchronous=True, **options)
    group = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=2)
    return group[name][...]


@pytest.fixture(scope="module")
def hdf5(tmp_path_factory):
    """An HDF5 file with the filters netCDF4 files carry (shuffle + deflate), a plain array,
    a tiny array kerchunk inlines, and kerchunk's references to it (JSON and parquet)."""
    root = tmp_path_factory.mktemp("refs")
    rng = np.random.default_rng(7)
    arrays = {
        "t2m": rng.normal(280, 10, (30, 17, 11)).astype("<f4"),
        "count": rng.integers(-2**40, 2**40, (45,), dtype="<i8"),
        "flag": np.arange(6, dtype="u1"),
        "wide": rng.normal(size=(9, 200)).astype("<f8"),
    }
    with h5py.File(root / "data.h5", "w") as f:
        f.create_dataset("t2m", data=arrays["t2m"], chunks=(4, 17, 11), compression="gzip", shuffle=True)
        f.create_dataset("count", data=arrays["count"], chunks=(10,))
        f.create_dataset("flag", data=arrays["flag"])
        f.create_dataset("wide", data=arrays["wide"], chunks=(2, 64), shuffle=True)
    refs = kerchunk_hdf.SingleHdf5ToZarr(str(root / "data.h5"), inline_threshold=64).translate()
    (root / "data.json").write_text(json.dumps(refs))
    from kerchunk.df import refs_to_dataframe
    refs_to_dataframe(refs, str(root / "data.parq"), record_size=3)
    return root, arrays, refs


@pytest.mark.parametrize("form", ["json", "parquet", "dict"])
def test_hdf5_references_match_fsspec_and_the_source(hdf5, form):
    root, arrays, refs = hdf5
    source = {"json": root / "data.json", "parquet": root / "data.parq", "dict": refs}[form]
    store = ib.reference_store(source)
    for name, expected in arrays.items():
        ours = read_whole(store, name)
        np.testing.assert_array_equal(ours, expected)
        np.testing.assert_array_equal(ours, oracle(str(source) if form != "dict" else refs, name))


def test_inline_chunks_are_read_without_a_target(hdf5):
    root, arrays, refs = hdf5
    inline = [k for k, v in refs["refs"].items() if isinstance(v, str) and not k.split("/")[-1].startswith(".")]
    assert inline, "kerchunk inlined no chunk: raise inline_threshold"
    store = ib.reference_store(root / "data.json")
    for key in inline:
        assert store.read(key) is not None


def test_templates_and_generators_match_fsspec(tmp_path):
    raw = np.arange(8 * 6, dtype="<i2").reshape(8, 6)
    (tmp_path / "blob_0.bin").write_bytes(raw[:4].tobytes())
    (tmp_path / "blob_1.bin").write_bytes(b"\xff" * 5 + raw[4:].tobytes())
    zarray = {"shape": [8, 6], "chunks": [2, 6], "dtype": "<i2", "compressor": None, "filters": None,
              "fill_value": 0, "order": "C", "zarr_format": 2}
    refs = {
        "version": 1,
        "templates": {"d": str(tmp_path)},
        "refs": {".zgroup": '{"zarr_format": 2}', "x/.zarray": json.dumps(zarray),
                 "x/2.0": ["{{d}}/blob_1.bin", 5, 24]},
        "gen": [
            {"key": "x/{{i}}.0", "url": "{{d}}/blob_0.bin", "offset": "{{i * 24}}", "length": "24",
             "dimensions": {"i": {"stop": 2}}},
            {"key": "x/3.0", "url": "{{d}}/blob_1.bin", "offset": "{{ 5 + 24 }}", "length": "{{48 // 2}}",
             "dimensions": {"unused": [0]}},
        ],
    }
    path = tmp_path / "refs.json"
    path.write_text(json.dumps(refs))
    store = ib.reference_store(path)
    np.testing.assert_array_equal(read_whole(store, "x"), raw)
    # fsspec expands `gen` only with jinja2 templates (simple_templates=False).
    np.testing.assert_array_equal(oracle(str(path), "x", simple_templates=False), raw)


def test_relative_targets_resolve_against_the_reference_file(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "v.bin").write_bytes(np.arange(4, dtype="<u4").tobytes())
    zarray = {"shape": [4], "chunks": [4], "dtype": "<u4", "compressor": None, "filters": None,
              "fill_value": 0, "order": "C", "zarr_format": 2}
    (tmp_path / "d" / "refs.json").write_text(json.dumps({".zgroup": '{"zarr_format": 2}',
                                                          "v/.zarray": json.dumps(zarray), "v/0": ["v.bin"]}))
    store = ib.reference_store(tmp_path / "d" / "refs.json")
    np.testing.assert_array_equal(ib.read_chunk(store, "v", (0,)), np.arange(4))
    # The store travels by recipe: a pickled copy (another process) re-opens it.
    clone = pickle.loads(pickle.dumps(store))
    np.testing.assert_array_equal(ib.read_chunk(clone, "v", (0,)), np.arange(4))


def test_a_dataset_streams_every_sample_once_from_references(hdf5):
    root, arrays, _ = hdf5
    store = ib.reference_store(root / "data.json")
    geometries = ib.open_geometries(store, variables=["t2m"])
    manifest = ib.split_by_chunk(geometries["t2m"], fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, manifest, geometries, batch_size=7, seed=3)
    seen = []
    for batch in ds.train:
        seen.append(batch.sample_indices.copy())
        np.testing.assert_array_equal(batch.arrays["t2m"], arrays["t2m"][batch.sample_indices])
    assert sorted(np.concatenate(seen).tolist()) == list(range(30))


def test_targets_over_http(hdf5):
    root, arrays, refs = hdf5
    server = RangeServer(root)
    try:
        remote = {**refs, "refs": {k: ([f"{server.url}/data.h5", *v[1:]] if isinstance(v, list) else v)
                                   for k, v in refs["refs"].items()}}
        store = ib.reference_store(remote, timeout="10s")
        np.testing.assert_array_equal(read_whole(store, "t2m"), arrays["t2m"])
        assert any("Range" in r["headers"] for r in server.requests), "reads were not ranged"
    finally:
        server.close()


def test_targets_and_reference_file_on_s3_with_signatures_checked(hdf5, moto_auth):
    import boto3
    root, arrays, refs = hdf5
    s3 = boto3.client("s3", endpoint_url=moto_auth.endpoint, region_name="us-east-1",
                      aws_access_key_id=moto_auth.access_key_id, aws_secret_access_key=moto_auth.secret_access_key)
    s3.put_object(Bucket=BUCKET, Key="virtual/data.h5", Body=(root / "data.h5").read_bytes())
    remote = {**refs, "refs": {k: ([f"s3://{BUCKET}/virtual/data.h5", *v[1:]] if isinstance(v, list) else v)
                               for k, v in refs["refs"].items()}}
    s3.put_object(Bucket=BUCKET, Key="virtual/refs.json", Body=json.dumps(remote).encode())
    options = dict(endpoint=moto_auth.endpoint, access_key_id=moto_auth.access_key_id,
                   secret_access_key=moto_auth.secret_access_key, region="us-east-1")
    store = ib.reference_store(f"s3://{BUCKET}/virtual/refs.json", **options)
    np.testing.assert_array_equal(read_whole(store, "wide"), arrays["wide"])
    with pytest.raises(ib.InSituError, match="virtual/data.h5"):
        wrong = ib.reference_store(remote, **{**options, "secret_access_key": "not-the-secret"})
        ib.read_chunk(wrong, "wide", (0, 0))


# -- hostile references -----------------------------------------------------------------------


def test_remote_references_may_not_read_local_files(tmp_path):
    """A reference file served by someone else names local files: refused before anything
    local is touched (the message says nothing of the file), unless the caller opts in.
    Relative targets resolve beside the remote reference file, as beside a local one."""
    secret = tmp_path / "local" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(np.arange(4, dtype="<u4").tobytes())
    served = tmp_path / "served"
    served.mkdir()
    (served / "beside.bin").write_bytes(np.arange(10, 14, dtype="<u4").tobytes())
    server = RangeServer(served)
    try:
        for target in (f"file://{secret}", str(secret), "/etc/passwd", "file:///etc/passwd"):
            (served / "refs.json").write_text(json.dumps(_one_array(target, 0, 16)))
            with pytest.raises(ib.InvalidArgumentError) as info:
                ib.reference_store(f"{server.url}/refs.json")
            # Exactly this: nothing about the local file (its existence, its size) is said.
            assert str(info.value) == (
                f"reference 'v/0' points to {target!r}, a local file, and the references come from"
                f" {server.url}/refs.json: remote references may point only at remote targets"
                " (pass allow_local_targets=True to read local files they name)")
        (served / "refs.json").write_text(json.dumps(_one_array(f"file://{secret}", 0, 16)))
        opted_in = ib.reference_store(f"{server.url}/refs.json", allow_local_targets=True)
        np.testing.assert_array_equal(ib.read_chunk(opted_in, "v", (0,)), np.arange(4, dtype="<u4"))
        assert pickle.loads(pickle.dumps(opted_in)) is not None  # the opt-in travels with the store
        # A relative target of a remote reference file is remote: beside it on the server.
        (served / "refs.json").write_text(json.dumps(_one_array("beside.bin", 0, 16)))
        beside = ib.reference_store(f"{server.url}/refs.json")
        np.testing.assert_array_equal(ib.read_chunk(beside, "v", (0,)), np.arange(10, 14, dtype="<u4"))
        # ... unless the caller names a local base: then it is local, and needs the opt-in.
        with pytest.raises(ib.InvalidArgumentError, match="a local file"):
            ib.reference_store(f"{server.url}/refs.json", base=str(secret.parent))
        with pytest.raises(ib.InvalidTypeError, match="allow_local_targets must be True or False"):
            ib.reference_store(f"{server.url}/refs.json", allow_local_targets="yes")
    finally:
        server.close()
    # References the caller holds or keeps locally may point at local files as before.
    np.testing.assert_array_equal(ib.read_chunk(ib.reference_store(_one_array(str(secret), 0, 16)), "v", (0,)),
                                  np.arange(4, dtype="<u4"))


def _one_array(url, offset, length):
    zarray = {"shape": [4], "chunks": [4], "dtype": "<u4", "compressor": None, "filters": None,
              "fill_value": 0, "order": "C", "zarr_format": 2}
    return {".zgroup": '{"zarr_format": 2}', "v/.zarray": json.dumps(zarray), "v/0": [url, offset, length]}


def test_a_range_past_the_end_of_its_target_names_the_key(tmp_path):
    (tmp_path / "short.bin").write_bytes(b"x" * 10)
    store = ib.reference_store(_one_array(str(tmp_path / "short.bin"), 4, 16))
    with pytest.raises(ib.CorruptChunkError, match=r"v/0 -> .*short\.bin \[bytes 4-19\].*runs past its end"):
        ib.read_chunk(store, "v", (0,))


@pytest.mark.parametrize("url, offset, length, message", [
    ("/data/x.bin", -1, 4, "negative offset"),
    ("/data/x.bin", 0, 2**63, "out of range"),
    ("/data/x.bin", 2**62, 2**62, "overflows"),
    ("/data/../../etc/passwd", 0, 4, "'..' segments"),
    ("s3://bucket/a/../../b", 0, 4, "'..' segments"),
    ("https://host/x?sig=abc", 0, 4, "query string"),
])
def test_hostile_references_are_refused_naming_the_key(url, offset, length, message):
    with pytest.raises(ib.InvalidArgumentError, match=message) as info:
        ib.reference_store(_one_array(url, offset, length))
    assert "v/0" in str(info.value)


def test_unknown_target_schemes_and_bad_sources_are_clear():
    with pytest.raises(ib.UnsupportedError, match="reference 'v/0' points to 'ftp://h/x': scheme 'ftp'"):
        ib.reference_store(_one_array("ftp://h/x", 0, 4))
    with pytest.raises(FileNotFoundError, match="reference file"):
        ib.reference_store("/nonexistent/refs.json")
    with pytest.raises(ib.InvalidTypeError, match="refs must be"):
        ib.reference_store(42)
    with pytest.raises(ib.InvalidArgumentError, match="unknown store option"):
        ib.reference_store({}, regoin="x")
    with pytest.raises(ib.InSituError, match="not valid JSON"):
        ib.reference_store(b"{oops")


def test_fits_images_through_kerchunk_match_astropy_and_fsspec(tmp_path):
    fits = pytest.importorskip("astropy.io.fits")
    kerchunk_fits = pytest.importorskip("kerchunk.fits")
    rng = np.random.default_rng(3)
    sci = rng.normal(size=(40, 24)).astype(">f4")
    counts = rng.normal(size=(7, 11)).astype(">f8")  # (kerchunk 0.2.10 fails on integer images under zarr 3)
    fits.HDUList([fits.PrimaryHDU(sci), fits.ImageHDU(counts, name="COUNTS")]).writeto(tmp_path / "x.fits")
    for ext, name, expected in ((0, "PRIMARY", sci), ("COUNTS", "COUNTS", counts)):
        refs = kerchunk_fits.process_file(f"file://{tmp_path / 'x.fits'}", extension=ext, inline_threshold=0)
        store = ib.reference_store(refs)
        ours = read_whole(store, name)
        np.testing.assert_array_equal(ours, expected)
        np.testing.assert_array_equal(ours, fits.getdata(tmp_path / "x.fits", ext))
        np.testing.assert_array_equal(ours, oracle({k: (v.decode() if isinstance(v, bytes) else v) for k, v in refs.items()}, name))


def _virtual_dataset(path):
    pytest.importorskip("obstore")
    virtualizarr = pytest.importorskip("virtualizarr")
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr.parsers import HDFParser

    registry = ObjectStoreRegistry({"file://": LocalStore()})
    return virtualizarr.open_virtual_dataset(f"file://{path}", registry=registry, parser=HDFParser(),
                                             loadable_variables=[])


@pytest.fixture
def one_variable_hdf5(hdf5, tmp_path):
    """t2m alone (xarray, under VirtualiZarr, refuses HDF5's clashing phony dimensions)."""
    _, arrays, _ = hdf5
    with h5py.File(tmp_path / "t2m.h5", "w") as f:
        f.create_dataset("t2m", data=arrays["t2m"], chunks=(4, 17, 11), compression="gzip", shuffle=True)
    return tmp_path, arrays["t2m"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_virtualizarr_datasets_and_their_kerchunk_output(one_variable_hdf5):
    root, expected = one_variable_hdf5
    vds = _virtual_dataset(root / "t2m.h5")
    vds.vz.to_kerchunk(str(root / "vz.json"), format="json")
    for source in (vds, root / "vz.json"):
        np.testing.assert_array_equal(read_whole(ib.reference_store(source), "t2m"), expected)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_icechunk_virtual_chunks_through_the_bridge(one_variable_hdf5, tmp_path_factory):
    icechunk = pytest.importorskip("icechunk")
    root, expected = one_variable_hdf5
    tmp_path = tmp_path_factory.mktemp("icechunk")
    vds = _virtual_dataset(root / "t2m.h5")
    prefix = f"file://{root}/"
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(str(root))))
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")), config,
                                      authorize_virtual_chunk_access=icechunk.containers_credentials({prefix: None}))
    session = repo.writable_session("main")
    vds.vz.to_icechunk(session.store)
    session.commit("virtual references to t2m.h5")
    store = ib.icechunk_store(f"file://{tmp_path / 'repo'}", virtual_chunk_credentials={prefix: None})
    np.testing.assert_array_equal(read_whole(store, "t2m"), expected)
    with pytest.raises(ib.InSituError, match="authorize"):
        ib.read_chunk(ib.icechunk_store(f"file://{tmp_path / 'repo'}"), "t2m", (0, 0, 0))


def test_a_pass_reads_adjacent_chunks_of_one_file_in_one_request(tmp_path):
    values = np.arange(64 * 5, dtype="<i4").reshape(64, 5)
    (tmp_path / "v.bin").write_bytes(values.tobytes())
    zarray = {"shape": [64, 5], "chunks": [4, 5], "dtype": "<i4", "compressor": None, "filters": None,
              "fill_value": 0, "order": "C", "zarr_format": 2}
    refs = {".zgroup": '{"zarr_format": 2}', "v/.zarray": json.dumps(zarray),
            **{f"v/{i}.0": [str(tmp_path / "v.bin"), i * 80, 80] for i in range(16)}}
    store = ib.reference_store(refs)
    geoms = ib.open_geometries(store)
    manifest = ib.split_by_chunk(geoms["v"], fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, manifest, geometries=geoms, batch_size=8, block_chunks=16)
    got = {}
    for batch in ds.train:
        got.update(zip(batch.sample_indices.tolist(), batch.arrays["v"]))
    ds.close()
    np.testing.assert_array_equal(np.stack([got[i] for i in range(64)]), values)
    # One block of 16 chunks, told to the store before its reads start: the chunks lie end
    # to end in one file, so the first read fetches them all and the rest come from memory.
    assert store.target_reads == 1, store.target_reads


def test_virtual_chunk_credentials_must_be_a_dict_of_prefixes(tmp_path):
    with pytest.raises(ib.InvalidArgumentError, match="virtual_chunk_credentials must be a dict"):
        ib.icechunk_store(f"file://{tmp_path}", virtual_chunk_credentials="s3://bucket/")
