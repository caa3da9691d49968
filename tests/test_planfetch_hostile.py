"""planfetch in a hostile environment and in careless hands: processes killed under it,
servers going away, indexes that are not what they claim. Real processes, real loopback
servers (tests/servers.py), real files."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from servers import FaultProxy, RangeServer

import planfetch as pf
from insitubatch import CorruptChunkError, InvalidArgumentError

TESTS = Path(__file__).parent


def _objects(root: Path, n: int) -> list[bytes]:
    (root / "bucket").mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        data = os.urandom(1000 + i)
        (root / "bucket" / f"obj{i}.bin").write_bytes(data)
        out.append(data)
    return out


def _python(body: str) -> list[str]:
    return [sys.executable, "-c", "import sys\nsys.path.insert(0, %r)\n" % str(TESTS) + textwrap.dedent(body)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


# -- 1: forked workers and a main process that dies --------------------------------------------
@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_job_restarted_after_its_main_process_died_does_not_hang(tmp_path, sig):
    data = _objects(tmp_path / "served", 1)
    cache_dir = tmp_path / "cache"
    with RangeServer(tmp_path / "served") as server, FaultProxy(server.url, hang_seconds=60) as proxy:
        uri = f"{proxy.url}/bucket/obj0.bin"
        proxy.plan.per_path("hang")  # the main process's download of it never ends
        # The main process starts the download, then forks two workers (as a DataLoader
        # does) that want the same object while it is under way.
        main = subprocess.Popen(_python(f"""
            import os, time
            import planfetch as pf
            cache = pf.SharedDiskCache({str(cache_dir)!r})
            cache.prefetch([{uri!r}])
            temp = cache.local_path({uri!r}) + ".insitu-dl"
            while not os.path.exists(temp):
                time.sleep(0.01)
            time.sleep(0.2)
            pids = []
            busy = os.fork()  # a worker busy elsewhere (decoding), never waiting in the cache
            if busy == 0:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                time.sleep(120)
                os._exit(0)
            for _ in range(2):
                pid = os.fork()
                if pid == 0:
                    try:
                        cache.ensure_local({uri!r})
                        os._exit(0)
                    except BaseException as exc:
                        # One write per report: the two workers exit together, and print's
                        # pieces from both interleaved on the shared pipe.
                        os.write(1, f"worker: {{type(exc).__name__}} {{exc}}\\n".encode())
                        os._exit(3)
                pids.append(pid)
            print(busy, *pids, flush=True)
            time.sleep(600)
        """), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        busy, *workers = [int(p) for p in main.stdout.readline().split()]
        assert len(workers) == 2, main.stderr.read()
        try:
            _restart_after_the_main_process_dies(main, busy, workers, cache_dir, uri, data[0], sig)
        finally:
            for pid in (busy, *workers):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)


def _restart_after_the_main_process_dies(main, busy, workers, cache_dir, uri, data, sig):
    time.sleep(0.5)
    # A waiter is bounded: another process's download that never ends is an error.
    waiter = subprocess.run(_python(f"""
        import planfetch as pf
        try:
            pf.SharedDiskCache({str(cache_dir)!r}, lock_wait_seconds=1).ensure_local({uri!r})
        except OSError as exc:
            print(exc)
    """), capture_output=True, text=True, timeout=30)
    assert "lock_wait_seconds" in waiter.stdout and "obj0.bin.insitu-dl" in waiter.stdout, waiter
    main.send_signal(sig)  # the main process alone (the OOM killer's SIGKILL, or a SIGTERM)
    main.wait(timeout=10)
    assert _alive(busy)  # it lives on, with whatever it inherited
    # Its waiting workers notice and exit rather than wait for ever.
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in workers), "workers outlived their main process"
    # Each stopped with the parent's exit named, or (the lock freed as the parent died, a
    # moment before it was seen gone) downloaded the object and finished.
    reports = main.stdout.read().splitlines()
    assert all("CancelledError" in r and "has exited" in r for r in reports), reports
    # A new job over the same directory takes the download over at once.
    t0 = time.monotonic()
    new = subprocess.run(_python(f"""
        import planfetch as pf
        print(pf.SharedDiskCache({str(cache_dir)!r}).ensure_local({uri!r}))
    """), capture_output=True, text=True, timeout=30)
    assert new.returncode == 0, new.stderr
    assert Path(new.stdout.strip()).read_bytes() == data
    assert time.monotonic() - t0 < 20


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="forks with the raw x86-64 fork syscall")
@pytest.mark.timeout(90)
def test_a_dead_processs_lock_kept_by_a_child_that_skipped_the_fork_handlers_is_not_waited_on(tmp_path):
    data = _objects(tmp_path / "served", 1)
    cache_dir = tmp_path / "cache"
    with RangeServer(tmp_path / "served") as server, FaultProxy(server.url, hang_seconds=60) as proxy:
        uri = f"{proxy.url}/bucket/obj0.bin"
        proxy.plan.per_path("hang")
        # The raw fork syscall runs no pthread_atfork handler: the child keeps its copy of
        # the main process's lock descriptor, as a child made some other way might.
        main = subprocess.Popen(_python(f"""
            import ctypes, os, time
            import planfetch as pf
            cache = pf.SharedDiskCache({str(cache_dir)!r})
            cache.prefetch([{uri!r}])
            while not os.path.exists(cache.local_path({uri!r}) + ".insitu-dl"):
                time.sleep(0.01)
            time.sleep(0.2)
            pid = ctypes.PyDLL(None).syscall(57)  # SYS_fork
            if pid == 0:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                time.sleep(120)
                os._exit(0)
            print(pid, flush=True)
            time.sleep(600)
        """), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        holder = int(main.stdout.readline())
        try:
            main.send_signal(signal.SIGKILL)
            main.wait(timeout=10)
            assert _alive(holder)
            t0 = time.monotonic()
            new = subprocess.run(_python(f"""
                import planfetch as pf
                print(pf.SharedDiskCache({str(cache_dir)!r}).ensure_local({uri!r}))
            """), capture_output=True, text=True, timeout=30)
            assert new.returncode == 0, new.stderr
            assert Path(new.stdout.strip()).read_bytes() == data[0]
            assert time.monotonic() - t0 < 10
        finally:
            if _alive(holder):
                os.kill(holder, signal.SIGKILL)


# -- 5: a short outage costs time, not the epoch -----------------------------------------------
def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("down_s", [1.0, 3.0, 10.0])
def test_downloads_survive_a_server_restart(tmp_path, down_s):
    data = _objects(tmp_path / "served", 8)
    with RangeServer(tmp_path / "served") as server:
        cache = pf.SharedDiskCache(tmp_path / "cache", download_threads=8)
        uris = [f"{server.url}/bucket/obj{i}.bin" for i in range(8)]
        bounce = server.restart(down_s)
        while not _refused(server.port):
            time.sleep(0.01)
        t0 = time.monotonic()
        cache.prefetch(uris)
        paths = [cache.ensure_local(u) for u in uris]
        elapsed = time.monotonic() - t0
        bounce.join()
        assert [Path(p).read_bytes() for p in paths] == data
        assert cache.stats()["retries"] >= 8
        assert elapsed >= down_s * 0.8


def test_a_hard_link_at_a_downloads_temp_name_is_refused_and_never_written(tmp_path):
    """The temp file is reopened (a killed writer's leftover) and truncated: through a planted
    hard link that would write the download into the file outside, then rename it in."""
    _objects(tmp_path / "served", 1)
    victim = tmp_path / "authorized_keys"
    victim.write_bytes(b"ssh-ed25519 AAAAC3Nza user@host\n")
    os.utime(victim, (1e9, 1e9))
    with RangeServer(tmp_path / "served") as server:
        cache = pf.SharedDiskCache(tmp_path / "cache")
        uri = f"{server.url}/bucket/obj0.bin"
        temp = Path(cache.local_path(uri) + ".insitu-dl")
        temp.parent.mkdir(parents=True)
        os.link(victim, temp)
        with pytest.raises(CorruptChunkError, match=rf"{temp} is a hard link"):
            cache.ensure_local(uri)
    assert victim.read_bytes() == b"ssh-ed25519 AAAAC3Nza user@host\n" and victim.stat().st_mtime == 1e9
    assert not Path(cache.local_path(uri)).exists()


# -- 3 and 4: indexes that are not UTF-8, lines that would eat memory --------------------------
@pytest.mark.parametrize("pack_uris", [False, True])
@pytest.mark.parametrize("column", ["s3_path", "class_id"])
def test_an_index_that_is_not_utf8_is_refused_at_load_naming_where(tmp_path, pack_uris, column):
    index = tmp_path / "latin1.csv"
    row = "s3://b/café.jpg,1" if column == "s3_path" else "s3://b/a.jpg,chat-é"
    index.write_bytes(("s3_path,class_id\ns3://b/x.jpg,0\n" + row + "\n").encode("latin-1"))
    offset = index.read_bytes().index(b"\xe9")
    with pytest.raises(InvalidArgumentError,
                       match=rf"latin1\.csv line 3, byte offset {offset}: byte 0xE9 is not UTF-8"):
        pf.load_index_csv(index, s3_uri_col="s3_path", class_col="class_id", pack_uris=pack_uris)


def test_a_line_of_commas_is_refused_in_memory_of_the_line(tmp_path):
    index = tmp_path / "commas.csv"
    with open(index, "wb") as f:
        f.write(b"s3_path,class_id\ns3://b/a.jpg,1\n")
        f.write(b"," * (16 << 20) + b"\n")
    out = subprocess.run(_python(f"""
        import resource
        import planfetch as pf
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            pf.load_index_csv({str(index)!r}, s3_uri_col="s3_path", class_col="class_id")
        except ValueError as exc:
            print(exc)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
    """), capture_output=True, text=True, timeout=60)
    message, grown = out.stdout.strip().splitlines()
    assert "commas.csv line 3: has more than 2 fields, the header 2" in message, out
    assert int(grown) < 100 << 20  # the file (16 MiB) and little else; 1 GB before


@pytest.mark.parametrize("bad", [0, -1, 86401, True, "10", float("nan")])
def test_lock_wait_seconds_must_be_a_positive_number_of_seconds(tmp_path, bad):
    with pytest.raises(InvalidArgumentError, match=r"lock_wait_seconds must be a number in \(0, 86400\]"):
        pf.SharedDiskCache(str(tmp_path / "cache"), lock_wait_seconds=bad)
