"""Checks a repaired wheel the way a user meets it: installed with --no-deps plus numpy into
a fresh venv, run from a directory outside the checkout with LD_LIBRARY_PATH unset and the
source tree not importable; then with its extras [cache], [planfetch], [lightning] and
[ray] installed, each used for real. Run by scripts/check_wheel.sh with the repo venv's
Python, which writes the data (zarr-python), serves it (HTTPS with a throwaway CA; S3 from
moto) and compares what the wheel reads with what was written.

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
    # manylinux2014_x86_64.manylinux_2_17_x86_64: the PEP 600 name
    (tag,) = [t for t in wheel.name.rsplit("-", 1)[1].removesuffix(".whl").split(".") if t.startswith("manylinux_")]
    (policy_file,) = (REPO / "build" / "wheel-tools").glob("lib/python3*/site-packages/auditwheel/policy/"
                                                          "manylinux-policy.json")
    (policy,) = [p for p in json.loads(policy_file.read_text()) if p["name"] == tag.removesuffix("_x86_64")]
    return {str(name) for name in policy["lib_whitelist"]} | {"linux-vdso.so.1", "ld-linux-x86-64.so.2"}


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


# [lightning]: InSituDataModule under a real Trainer, two epochs with validation; every batch
# the loop saw equals the values zarr-python wrote, in the order the dataset's epochs give.
LIGHTNING = """
    import numpy as np, pytorch_lightning as pl, torch
    from insitubatch import InSituDataset, open_geometries, split_by_chunk, store
    from insitubatch.frameworks.lightning import InSituDataModule
    for module in (torch, pl):  # the extra's, not the driver's
        assert module.__file__.startswith(sys.prefix), module.__file__
    want = np.load("values.npy")
    s = store("{path}")
    geoms = open_geometries(s, variables=["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.75, 0.25, 0.0))
    ds = InSituDataset(s, manifest, geometries=geoms, batch_size=16, block_chunks=2, seed=7)

    class Recorder(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(19 * 36, 1)
            self.train_seen, self.val_seen = [], []
        def on_train_epoch_start(self):
            self.train_seen.append([])
        def training_step(self, batch, batch_idx):
            self.train_seen[-1].append(batch["t2m"].numpy().copy())
            return self.net(batch["t2m"].flatten(1) / 300).pow(2).mean()
        def validation_step(self, batch, batch_idx):
            self.val_seen.append(batch["t2m"].numpy().copy())
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    model = Recorder()
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=InSituDataModule(ds))
    expected = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        expected.append([want[b.sample_indices] for b in ds.train])
    for seen, exp in zip(model.train_seen, expected, strict=True):
        assert len(seen) == len(exp) and all(np.array_equal(a, b) for a, b in zip(seen, exp))
    assert trainer.global_step == sum(map(len, expected))
    val = [want[b.sample_indices] for b in ds.val]
    assert all(np.array_equal(a, b) for a, b in zip(model.val_seen[-len(val):], val, strict=True))
    ds.close()
    print(f"{{trainer.global_step}} steps over 2 epochs and validation, every batch exact"
          f" (pytorch-lightning {{pl.__version__}}, torch {{torch.__version__}})")
"""

# [ray]: read_insitu on a local Ray cluster: every train sample once, each row exact.
RAY = """
    import numpy as np, ray
    from insitubatch import open_geometries, split_by_chunk, store
    from insitubatch.frameworks.ray import SAMPLE_INDEX, read_insitu
    assert ray.__file__.startswith(sys.prefix), ray.__file__
    want = np.load("values.npy")
    geoms = open_geometries(store("{path}"), variables=["t2m"])
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.8, 0.2, 0.0), seed=3)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=200 << 20,
             configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    rows = read_insitu("{path}", manifest, geoms, batch_size=16, block_chunks=4, override_num_blocks=2).take_all()
    ray.shutdown()
    assert sorted(int(r[SAMPLE_INDEX]) for r in rows) == manifest.sample_indices("train").tolist()
    assert all(np.array_equal(r["t2m"], want[r[SAMPLE_INDEX]]) for r in rows)
    print(f"{{len(rows)}} train rows, each once and exact (ray {{ray.__version__}})")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def upload_store(endpoint: str, store: Path) -> None:
    """Every file of the local store `store` into moto's bucket "check", under its name."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket="check")
    for f in store.rglob("*"):
        if f.is_file():
            s3.put_object(Bucket="check", Key=f"{store.name}/{f.relative_to(store)}", Body=f.read_bytes())


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


EXTRAS = ("cache", "planfetch", "lightning", "ray")
# What the extras pull in that is gigabytes or slow to resolve: the client must get the
# framework venv's versions (pip's cache has them; torch==2.13.0 lies on this machine's disk).
FRAMEWORKS = ("torch", "pytorch-lightning", "ray")


def framework_constraints(where: Path) -> Path:
    """The repo venv's distributions as `name==version` constraints (those installed from an
    index; not ours): the extras then install exactly the versions scripts/test_frameworks.sh
    put there, out of pip's cache, and never let pip pick another torch."""
    import re
    from importlib import metadata

    pins = {}
    for dist in metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if name and name not in ("insitubatch", "planfetch") and dist.read_text("direct_url.json") is None:
            pins[name] = dist.version
    missing = [name for name in FRAMEWORKS if name not in pins]
    if missing:
        raise SystemExit(f"check_wheel: the extras' check pins {', '.join(missing)} to the framework venv's"
                         f" version, and {sys.prefix} has none: run scripts/test_frameworks.sh first (it installs"
                         " requirements/frameworks.txt there)")
    where.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    return where


def deps_dir(where: Path, client_site: Path) -> Path:
    """The repo venv's third-party packages the client venv lacks (boto3, moto, ...) as links,
    without ours: the planfetch demo's own dependencies beside the extras' (torch, PIL),
    which the client venv has installed."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    if not (site / "moto").is_dir():
        raise SystemExit(f"check_wheel: the planfetch demo needs moto in {site}: run scripts/setup.sh")
    where.mkdir()
    present = {entry.name for entry in client_site.iterdir()}
    for entry in site.iterdir():
        name = entry.name.lower()
        if (name.startswith(OUR_PACKAGES) or name.endswith(".pth") or name == "__pycache__"
                or entry.name in present):
            continue
        (where / entry.name).symlink_to(entry)
    return where


def scratch_dir() -> str | None:
    """/dev/shm when it is a tmpfs with 4 GiB free, else the default temporary directory. The
    extras fill the client venv with 1.3 GB in ~60,000 files (torch, ray, pyarrow): on this
    loaded 2-vCPU VM's disk writing them took ~80 s and deleting them ~130 s."""
    try:
        with open("/proc/mounts") as mounts:
            tmpfs = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in mounts)
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if tmpfs and stat.f_bavail * stat.f_frsize >= 4 << 30 else None


def check_cpu_paths(debug_report: str) -> None:
    """The wheel's hand-vectorized loops are taken where this CPU offers them: zig's
    compiler runtime answers __builtin_cpu_supports with "no" for everything, which once left
    every wheel on the portable CRC-32C and batch copy."""
    from cpu_flags import cpu_paths_row, proc_cpu_flags

    row = cpu_paths_row(debug_report)
    if row is None:
        raise SystemExit(f"check_wheel: print_debug_info has no cpu paths row:\n{debug_report}")
    flags = proc_cpu_flags()
    for flag, path in (("sse4_2", "crc32c sse4.2"), ("avx2", "avx2 streaming stores")):
        if (flag in flags) != (path in row):
            raise SystemExit(f"check_wheel: the wheel's cpu paths ({row}) disagree with /proc/cpuinfo's {flag}"
                             f" ({'present' if flag in flags else 'absent'})")
    step(f"cpu paths as /proc/cpuinfo offers them: {row}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("--python", required=True, help="the interpreter to make the fresh venv with")
    args = p.parse_args()
    wheel = args.wheel.resolve()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="insitubatch-wheel-check-", dir=scratch_dir()) as tmp_name:
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
        check_cpu_paths(out)

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
            upload_store(endpoint, work / "era5.zarr")
            run_client(python, READ.format(url="s3://check/era5.zarr", options={"endpoint": endpoint}), work, aws)
            step("S3 from moto: exact")
        finally:
            moto.terminate()
            moto.wait()

        # Each extra the docs name, installed with the wheel and used: [cache] keys a chunk
        # transform by its pickle (cloudpickle); [lightning] and [ray] below; [planfetch] runs
        # the demo. The versions are the framework venv's (out of pip's cache).
        t0 = time.monotonic()
        constraints = framework_constraints(tmp / "constraints.txt")
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # --no-compile: byte-compiling torch's and ray's ~10,000 modules costs more than the
        # few hundred the checks import compile on the fly.
        subprocess.run([*pip, "--no-compile", "-c", str(constraints), f"{wheel}[{','.join(EXTRAS)}]"], check=True)
        step(f"extras [{'], ['.join(EXTRAS)}] installed with the wheel in {time.monotonic() - t0:.0f} s")
        out = run_client(python, "from insitubatch import caching\n"
                                 "token, best_effort = caching.transform_token(lambda chunk: chunk)\n"
                                 "assert token.startswith('pickle:') and not best_effort, token\nprint(token[:15])",
                         work)
        step(f"[cache]: a transform is keyed by its pickle ({out.strip()}...)")
        t0 = time.monotonic()
        out = run_client(python, LIGHTNING.format(path=work / "era5.zarr"), work)
        step(f"[lightning]: InSituDataModule under a Trainer: {out.strip().splitlines()[-1]}"
             f" ({time.monotonic() - t0:.0f} s)")
        t0 = time.monotonic()
        out = run_client(python, RAY.format(path=work / "era5.zarr"), work)
        step(f"[ray]: read_insitu on a local cluster: {out.strip().splitlines()[-1]} ({time.monotonic() - t0:.0f} s)")

        # [planfetch]: the planfetch demo, as a user runs it (its own copy, outside the
        # checkout), on the extra's torch and Pillow; moto and boto3 from the driver's venv.
        demo = work / "planfetch_s3_demo.py"
        shutil.copy(REPO / "examples" / "planfetch_s3_demo.py", demo)
        client_site = Path(run_client(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                                      work).strip())
        env = client_env({"PYTHONPATH": str(deps_dir(tmp / "deps", client_site))})
        launch = (f"import planfetch, PIL, rich, runpy, sys, torch\n"
                  f"for m in (planfetch, PIL, rich, torch): assert m.__file__.startswith({str(tmp / 'venv')!r}), m\n"
                  f"sys.argv = [{str(demo)!r}, '--epochs', '1', '--images', '300', '--workers', '1'];"
                  f" runpy.run_path({str(demo)!r}, run_name='__main__')")
        demo_run = subprocess.run([str(python), "-P", "-c", launch], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=300)
        if demo_run.returncode != 0 or "epoch 0: 300 images exact" not in demo_run.stdout:
            raise SystemExit(f"check_wheel: the planfetch demo failed:\n{demo_run.stdout}\n{demo_run.stderr}")
        step("[planfetch]: the planfetch demo, first epoch: " + next(
            line for line in demo_run.stdout.splitlines() if line.startswith("epoch 0")))
    step(f"passed in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
