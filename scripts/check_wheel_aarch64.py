"""The aarch64 wheel's smoke run, under qemu-user: Debian's arm64 CPython (an unpacked tree,
scripts/debian_python.sh) runs the wheel from a fresh venv outside the checkout (`python -I`),
with PyPI's aarch64 wheels of numpy and zarr beside it: zarr (arm64) writes a store and the
wheel reads it back exactly, and reads a store whose chunks end in the crc32c codec with
ARMv8's CRC32 instructions; HTTPS from a loopback server whose certificate a throwaway CA
signed; S3 from moto (on the build machine, x86-64); one planfetch epoch through the native
prefetcher from that moto, every object's bytes checked. Run by scripts/check_wheel_aarch64.sh
with the repo venv's Python, which serves the data.

    .venv/bin/python scripts/check_wheel_aarch64.py WHEEL --root ROOT --python 3.11
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from check_wheel import client_env, scratch_dir, start_moto, step, upload_store

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the driver's own helpers (never the client's)

# The client's numpy and zarr: the repo venv's versions, as PyPI's aarch64 wheels.
CLIENT_PACKAGES = ("numpy", "zarr", "numcodecs")

WRITE_AND_READ = """
    import numpy as np, zarr
    from zarr.codecs import ZstdCodec
    from insitubatch import InSituDataset, open_geometries, read_chunk, split_by_chunk, store
    rng = np.random.default_rng(0)
    want = np.round(rng.normal(280, 10, size=(48, 19, 36)), 1).astype("float32")
    arr = zarr.create_array(zarr.storage.LocalStore("era5.zarr"), name="t2m", shape=want.shape,
                            chunks=(8, 19, 36), dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0.0)
    arr[...] = want
    np.save("values.npy", want)
    s = store("era5.zarr")
    for c in range(6):
        assert np.array_equal(read_chunk(s, "t2m", (c, 0, 0)), want[8 * c:8 * c + 8]), c
    geoms = open_geometries(s, variables=["t2m"])
    ds = InSituDataset(s, split_by_chunk(geoms["t2m"], fractions=(0.75, 0.25, 0.0)), geometries=geoms,
                       batch_size=8, block_chunks=2)
    rows = 0
    for batch in ds.train:
        assert np.array_equal(batch.arrays["t2m"], want[batch.sample_indices])
        rows += len(batch)
    ds.close()
    crc = np.load("crc_values.npy")  # every chunk's crc32c checked by the wheel as it reads
    checked = store("crc.zarr")
    for c in range(len(crc) // 4):
        assert np.array_equal(read_chunk(checked, "x", (c, 0, 0)), crc[4 * c:4 * c + 4]), c
    import platform
    print(platform.machine(), f"numpy {np.__version__}, zarr {zarr.__version__};", rows, "train rows exact;",
          len(crc) // 4, "crc32c-checked chunks exact")
    insitubatch.print_debug_info()
"""

READ = """
    import numpy as np
    from insitubatch import read_chunk, store
    want = np.load("values.npy")
    s = store("{url}", **{options})
    for c in range(6):
        assert np.array_equal(read_chunk(s, "t2m", (c, 0, 0)), want[8 * c:8 * c + 8]), c
    print(s.ca_bundle)
"""

# One epoch of planfetch's prefetcher without a framework: a plan, the coordinator's sliding
# window of downloads into a SharedDiskCache, a plain loop over the plan's batches.
PLANFETCH = """
    import hashlib, json
    import planfetch as pf
    objects = json.load(open("objects.json"))
    uris = sorted(objects)
    cache = pf.SharedDiskCache("cache", max_bytes=1 << 30, download_threads=8, min_age_seconds_before_delete=0.0)
    ds = pf.S3PathDataset(uris, cache=cache, image_loader=lambda path: open(path, "rb").read())
    provider = pf.ShuffleOncePerEpochPlanProvider(len(uris), batch_size=10, seed=5)
    sampler = pf.PlanBatchSampler(provider.make_epoch_plan(0))
    coordinator = pf.PrefetchCoordinator(cache, uris, batches_ahead=6, batches_back=2, prune_every=3)
    controller = pf.PrefetchController(provider, sampler, coordinator)

    class Batches:
        def __iter__(self):
            for batch in sampler:
                yield [(i, ds[i]) for i in batch]
        def __len__(self):
            return len(sampler)

    controller.set_epoch(0)
    seen = set()
    for batch in pf.PrefetchingLoader(Batches(), coordinator, sampler):
        for i, data in batch:
            assert hashlib.sha256(data).hexdigest() == objects[uris[i]], uris[i]
            seen.add(i)
    assert seen == set(range(len(uris))), len(seen)
    stats = cache.stats()
    cache.close()
    print(f"{len(seen)} objects exact; {stats['downloads']} downloads, {stats['failures']} failures")
"""


def write_crc32c_store(path: Path) -> np.ndarray:
    """A store whose chunks (64 KiB each) end in the crc32c codec, written by the build
    machine's zarr: the client checks each chunk's checksum as it reads it."""
    import zarr
    from zarr.codecs import Crc32cCodec

    values = np.random.default_rng(1).random((24, 64, 64), dtype="float32")
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="x", shape=values.shape, chunks=(4, 64, 64),
                            dtype="float32", compressors=[Crc32cCodec()], fill_value=0.0)
    arr[...] = values
    return values


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("--root", type=Path, required=True, help="Debian's arm64 CPython, unpacked")
    p.add_argument("--python", required=True, help="its version, 3.X")
    p.add_argument("--qemu", default=shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64"))
    args = p.parse_args()
    if not args.qemu:
        raise SystemExit("check_wheel_aarch64: no qemu-aarch64 (apt install qemu-user-static)")
    wheel, root = args.wheel.resolve(), args.root.resolve()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="insitubatch-aarch64-check-", dir=scratch_dir()) as tmp_name:
        tmp = Path(tmp_name)
        interpreter = [args.qemu, "-L", str(root)]
        # A venv of the arm64 interpreter, without pip: the build machine's pip installs the
        # aarch64 wheels into it (--platform), which under emulation would take minutes.
        subprocess.run([*interpreter, str(root / f"usr/bin/python{args.python}"), "-m", "venv", "--without-pip",
                        str(tmp / "venv")], check=True)
        site = tmp / "venv" / "lib" / f"python{args.python}" / "site-packages"
        from importlib import metadata

        pins = [f"{name}=={metadata.version(name)}" for name in CLIENT_PACKAGES]
        glibc = "2_36" if args.python == "3.11" else "2_41"  # bookworm's, trixie's
        platforms = [f"--platform=manylinux_{glibc}_aarch64", "--platform=manylinux_2_28_aarch64",
                     "--platform=manylinux_2_17_aarch64", "--platform=manylinux2014_aarch64"]
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                        "--only-binary=:all:", *platforms, f"--python-version={args.python}", "--implementation=cp",
                        f"--abi=cp{args.python.replace('.', '')}", f"--target={site}", str(wheel), *pins], check=True)
        step(f"aarch64 venv (Debian's arm64 CPython {args.python} under {Path(args.qemu).name}): {wheel.name},"
             f" {', '.join(pins)} (PyPI's aarch64 wheels) in {time.monotonic() - t0:.0f} s")
        python = tmp / "venv" / "bin" / "python"
        work = tmp / "work"
        work.mkdir()
        np.save(work / "crc_values.npy", write_crc32c_store(work / "crc.zarr"))

        def client(code: str, env: dict[str, str] | None = None) -> str:
            prologue = textwrap.dedent(f"""
                import insitubatch, sys
                assert insitubatch.__file__.startswith({str(tmp / 'venv')!r}), insitubatch.__file__
                # (the interpreter's own standard library lies in the checkout's build/)
                assert not any(p.startswith({str(REPO)!r}) and not p.startswith({str(root)!r})
                               for p in sys.path if p), sys.path
            """)
            out = subprocess.run([*interpreter, str(python), "-I", "-c", prologue + textwrap.dedent(code)], cwd=work,
                                 env=client_env(env), capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise SystemExit(f"check_wheel_aarch64: client failed:\n{out.stdout}\n{out.stderr}")
            return out.stdout

        t0 = time.monotonic()
        out = client(WRITE_AND_READ)
        build = next((line.strip() for line in out.splitlines() if "repaired wheel" in line), None)
        if not out.startswith("aarch64 ") or build is None or "manylinux_2_17_aarch64" not in build:
            raise SystemExit(f"check_wheel_aarch64: not the aarch64 repaired wheel:\n{out}")
        from cpu_flags import cpu_paths_row

        cpu = cpu_paths_row(out) or ""
        if "crc32c armv8 crc32" not in cpu:  # qemu's default CPU ("max") has the CRC32 extension
            raise SystemExit(f"check_wheel_aarch64: the wheel did not take ARMv8's CRC32 path (cpu paths: {cpu!r}):\n{out}")
        step(f"local store written by zarr (arm64), read exactly: {out.splitlines()[0]} ({time.monotonic() - t0:.0f} s);"
             f" debug info: {build}; cpu paths: {cpu}")

        from tls_ca import https_range_server, make_test_ca

        ca = make_test_ca(tmp / "ca")
        server = https_range_server(work, ca)
        try:
            out = client(READ.format(url=f"{server.url}/era5.zarr", options={"max_retries": 0}),
                         {"SSL_CERT_FILE": str(ca.ca_pem)})
            step(f"HTTPS (arm64 OpenSSL) from 127.0.0.1 with a test CA through SSL_CERT_FILE: exact ({out.strip()})")
        finally:
            server.close()

        aws = {"AWS_ACCESS_KEY_ID": "check", "AWS_SECRET_ACCESS_KEY": "check-secret", "AWS_REGION": "us-east-1"}
        os.environ.update(aws)
        moto, endpoint = start_moto()
        try:
            import boto3

            upload_store(endpoint, work / "era5.zarr")
            s3 = boto3.client("s3", endpoint_url=endpoint)
            client(READ.format(url="s3://check/era5.zarr", options={"endpoint": endpoint}), aws)
            step("S3 from moto (on the build machine): exact")

            rng = np.random.default_rng(1)
            objects = {}
            for i in range(120):
                body = rng.integers(0, 256, int(rng.integers(1000, 20000)), dtype=np.uint8).tobytes()
                key = f"objects/class_{i % 4}/obj_{i:04d}.bin"
                s3.put_object(Bucket="check", Key=key, Body=body)
                objects[f"s3://check/{key}"] = hashlib.sha256(body).hexdigest()
            (work / "objects.json").write_text(json.dumps(objects))
            t0 = time.monotonic()
            out = client(PLANFETCH, {**aws, "AWS_ENDPOINT_URL_S3": endpoint})
            step(f"planfetch, one epoch from moto through the native prefetcher: {out.strip()}"
                 f" ({time.monotonic() - t0:.0f} s)")
        finally:
            moto.terminate()
            moto.wait()
    step(f"aarch64 passed in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
