"""Checks a repaired wheel the way a user meets it: installed with --no-deps plus numpy into
a fresh venv, run from a directory outside the checkout with LD_LIBRARY_PATH unset and the
source tree not importable. Run by scripts/check_wheel.sh with the repo venv's Python,
which writes the data (zarr-python), serves it (HTTPS with a throwaway CA; S3 from moto)
and compares what the wheel reads with what was written.

    .venv/bin/python scripts/check_wheel.py WHEEL --python BASE_PYTHON
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the driver's own helpers (never the client's)

OUR_PACKAGES = ("insitubatch", "planfetch", "numpy")


def policy_libraries(wheel: Path) -> set[str]:
    """The libraries the wheel's manylinux policy takes from the system (auditwheel's own
    list, from build/wheel-tools), plus the loader and the vDSO; anything else must come
    from the wheel's insitubatch.libs."""
    tag = wheel.name.rsplit("-", 1)[1].removesuffix(".whl")
    (policy_file,) = (REPO / "build" / "wheel-tools").glob("lib/python3*/site-packages/auditwheel/policy/"
                                                          "manylinux-policy.json")
    (policy,) = [p for p in json.loads(policy_file.read_text()) if p["name"] == tag.removesuffix("_x86_64")]
    return set(policy["lib_whitelist"]) | {"linux-vdso.so.1", "ld-linux-x86-64.so.2"}


def step(text: str) -> None:
    print(f"check_wheel: {text}", flush=True)


def client_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
           and not k.startswith(("SSL_CERT", "CURL_CA", "REQUESTS_CA", "AWS_"))}
    env.update(extra or {})
    return env


def run_client(python: Path, code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Runs `code` in the fresh venv, isolated (-I: no PYTHONPATH, no script or cwd on sys.path)."""
    prologue = textwrap.dedent(f"""
        import insitubatch, sys
        assert insitubatch.__file__.startswith({str(python.parent.parent)!r}), insitubatch.__file__
        assert not any(p.startswith({str(REPO)!r}) for p in sys.path if p), sys.path
    """)
    out = subprocess.run([str(python), "-I", "-c", prologue + textwrap.dedent(code)], cwd=cwd,
                         env=client_env(env), capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"check_wheel: client failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def fresh_venv(base_python: str, wheel: Path, where: Path) -> Path:
    subprocess.run([base_python, "-m", "venv", str(where)], check=True)
    python = where / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
    numpy_version = np.__version__  # the repo venv's: pip's cache has it
    subprocess.run([*pip, f"numpy=={numpy_version}"], check=True)
    return python


def check_ldd(python: Path, allowed: set[str]) -> None:
    ext = subprocess.run([str(python), "-I", "-c", "import insitubatch._ext as e; print(e.__file__)"],
                         env=client_env(), capture_output=True, text=True, check=True).stdout.strip()
    libs_dir = str(Path(ext).parent.parent / "insitubatch.libs")
    out = subprocess.run(["ldd", ext], env=client_env(), capture_output=True, text=True, check=True).stdout
    bundled = 0
    for line in out.splitlines():
        line = line.strip()
        if "not found" in line:
            raise SystemExit(f"check_wheel: ldd: {line}")
        name = line.split()[0]
        path = os.path.normpath(line.split("=>")[1].split()[0] if "=>" in line else name)
        if path.startswith(libs_dir + "/"):
            bundled += 1
        elif Path(name).name not in allowed:
            raise SystemExit(f"check_wheel: {ext} loads {path}, neither bundled nor in the manylinux policy")
    step(f"ldd: every library resolves; {bundled} from insitubatch.libs, the rest the policy's system libraries")


def make_store(path: Path) -> np.ndarray:
    import zarr
    from zarr.codecs import ZstdCodec

    rng = np.random.default_rng(0)
    values = np.round(rng.normal(280, 10, size=(96, 19, 36)), 1).astype("float32")
    arr = zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=values.shape, chunks=(8, 19, 36),
                            dtype="float32", compressors=[ZstdCodec(level=1)], fill_value=0.0)
    arr[...] = values
    return values


QUICKSTART = """
    import numpy as np
    from insitubatch import InSituDataset, open_geometries, split_by_chunk, store
    want = np.load("values.npy")
    s = store("{path}")
    geoms = open_geometries(s, variables=["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
    ds = InSituDataset(s, manifest, geometries=geoms, batch_size=16, block_chunks=4)
    for split in (ds.train, ds.val):
        rows = 0
        for batch in split:
            assert np.array_equal(batch.arrays["t2m"], want[batch.sample_indices])
            rows += len(batch)
        assert rows > 0
    ds.close()
    insitubatch.print_debug_info()
"""

READ = """
    import numpy as np
    from insitubatch import open_geometries, read_chunk, store
    want = np.load("values.npy")
    s = store("{url}", **{options})
    print(s.ca_bundle)
    geoms = open_geometries(s, variables=["t2m"])
    for c in range(geoms["t2m"].shape[0] // 8):
        assert np.array_equal(read_chunk(s, "t2m", (c, 0, 0)), want[8 * c:8 * c + 8]), c
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise SystemExit("check_wheel: moto's S3 server did not start") from None
            time.sleep(0.1)


def deps_dir(where: Path) -> Path:
    """The repo venv's third-party packages (torch, PIL, boto3, moto, ...) as links, without
    ours or numpy: the planfetch demo's own dependencies, so the client venv stays minimal."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    missing = [name for name in ("torch", "PIL", "moto") if not (site / name).is_dir()]
    if missing:
        raise SystemExit(f"check_wheel: the planfetch demo needs {', '.join(missing)} in {site}: run"
                         " scripts/test_frameworks.sh first (it installs requirements/frameworks.txt there)")
    where.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(OUR_PACKAGES) or name.endswith(".pth") or name == "__pycache__":
            continue
        (where / entry.name).symlink_to(entry)
    return where


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("--python", required=True, help="the interpreter to make the fresh venv with")
    args = p.parse_args()
    wheel = args.wheel.resolve()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="insitubatch-wheel-check-") as tmp_name:
        tmp = Path(tmp_name)
        assert not tmp.is_relative_to(REPO)
        python = fresh_venv(args.python, wheel, tmp / "venv")
        step(f"fresh venv: {wheel.name} (--no-deps) and numpy")
        check_ldd(python, policy_libraries(wheel))

        work = tmp / "work"
        work.mkdir()
        values = make_store(work / "era5.zarr")
        np.save(work / "values.npy", values)
        out = run_client(python, QUICKSTART.format(path=work / "era5.zarr"), work)
        if "repaired wheel" not in out:
            raise SystemExit(f"check_wheel: print_debug_info does not report a repaired wheel:\n{out}")
        step("quickstart on a local store: every batch equals zarr-python's values; debug info: "
             + next(line.strip() for line in out.splitlines() if "repaired wheel" in line))

        from tls_ca import https_range_server, make_test_ca

        ca = make_test_ca(tmp / "ca")
        server = https_range_server(work, ca)
        try:
            url = f"{server.url}/era5.zarr"
            out = run_client(python, READ.format(url=url, options={"max_retries": 0}), work,
                             {"SSL_CERT_FILE": str(ca.ca_pem)})
            if "from SSL_CERT_FILE" not in out:
                raise SystemExit(f"check_wheel: the HTTPS store did not use SSL_CERT_FILE: {out}")
            step(f"HTTPS from 127.0.0.1 with a test CA through SSL_CERT_FILE: exact ({out.strip()})")
        finally:
            server.close()

        aws = {"AWS_ACCESS_KEY_ID": "check", "AWS_SECRET_ACCESS_KEY": "check-secret", "AWS_REGION": "us-east-1"}
        os.environ.update(aws)
        moto, endpoint = start_moto()
        try:
            import boto3

            s3 = boto3.client("s3", endpoint_url=endpoint)
            s3.create_bucket(Bucket="check")
            for f in (work / "era5.zarr").rglob("*"):
                if f.is_file():
                    s3.put_object(Bucket="check", Key=f"era5.zarr/{f.relative_to(work / 'era5.zarr')}",
                                  Body=f.read_bytes())
            run_client(python, READ.format(url="s3://check/era5.zarr", options={"endpoint": endpoint}), work, aws)
            step("S3 from moto: exact")
        finally:
            moto.terminate()
            moto.wait()

        # Every extra the docs name resolves against the index with the wheel (pip --dry-run:
        # torch and ray are gigabytes); [cache] is installed and does its job: with
        # cloudpickle, a chunk transform's cache key is its pickle, not best-effort source.
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        for extra in ("cache", "planfetch", "lightning", "ray"):
            subprocess.run([*pip, "--dry-run", f"{wheel}[{extra}]"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*pip, f"{wheel}[cache]"], check=True)
        out = run_client(python, "from insitubatch import caching\n"
                                 "token, best_effort = caching.transform_token(lambda chunk: chunk)\n"
                                 "assert token.startswith('pickle:') and not best_effort, token\nprint(token[:15])",
                         work)
        step(f"extras [cache], [planfetch], [lightning], [ray] resolve; [cache] installed keys transforms by"
             f" pickle ({out.strip()}...)")

        # The planfetch demo, as a user runs it: its own copy, outside the checkout.
        demo = work / "planfetch_s3_demo.py"
        shutil.copy(REPO / "examples" / "planfetch_s3_demo.py", demo)
        env = client_env({"PYTHONPATH": str(deps_dir(tmp / "deps"))})
        launch = (f"import planfetch, runpy, sys; assert planfetch.__file__.startswith({str(tmp / 'venv')!r});"
                  f" sys.argv = [{str(demo)!r}, '--epochs', '1', '--images', '300', '--workers', '1'];"
                  f" runpy.run_path({str(demo)!r}, run_name='__main__')")
        out = subprocess.run([str(python), "-P", "-c", launch], cwd=work, env=env, capture_output=True, text=True,
                             timeout=300)
        if out.returncode != 0 or "epoch 0: 300 images exact" not in out.stdout:
            raise SystemExit(f"check_wheel: the planfetch demo failed:\n{out.stdout}\n{out.stderr}")
        step("planfetch demo, first epoch: " + next(
            line for line in out.stdout.splitlines() if line.startswith("epoch 0")))
    step(f"passed in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
