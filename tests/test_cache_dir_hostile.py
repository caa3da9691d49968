"""The disk tier in a hostile cache directory: planted symlinks and FIFOs, a user's own files
beside the cache's, read-only mounts and copies for readonly_cache readers, a directory
emptied or removed under a running writer, and a cache_dir whose parent is missing. The
tier owns only the names it generates and writes nothing outside the directory."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from insitubatch import InvalidArgumentError, NotFoundError
from test_cache_dir import _chunk_files, _chunk_reads, _dataset, _epoch, _write


@pytest.fixture
def era(tmp_path):
    path = tmp_path / "era.zarr"
    return path, _write(path)


def _warm(path, values, cache) -> None:
    ds, _ = _dataset(path, cache, persist=True)
    assert _epoch(ds, values) == 48
    ds.close()


@pytest.mark.parametrize("name", [".insitu.lock", ".insitu.readers", "insitu_cache.jsonl"])
def test_a_symlink_planted_at_a_fixed_name_is_refused_and_its_target_untouched(era, tmp_path, name):
    path, values = era
    cache = tmp_path / "cache"
    cache.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("")  # empty: a log read through the link would pass as a new log
    (cache / name).symlink_to(victim)
    with pytest.raises(InvalidArgumentError, match=rf"{cache / name} is a symbolic link"):
        ds, _ = _dataset(path, cache, persist=True)
        _epoch(ds, values)
    assert victim.read_text() == ""


@pytest.mark.parametrize("name", [".insitu.lock", ".insitu.readers", "insitu_cache.jsonl"])
def test_a_hard_link_planted_at_a_fixed_name_is_refused_and_its_target_untouched(era, tmp_path, name):
    """O_NOFOLLOW does not see a hard link: the link count does. The file outside keeps its
    bytes and its mtime (a lock's holder record or a log line would change both)."""
    path, values = era
    cache = tmp_path / "cache"
    cache.mkdir()
    victim = tmp_path / "authorized_keys"
    victim.write_bytes(b"" if name.endswith(".jsonl") else b"ssh-ed25519 AAAAC3Nza user@host\n")
    before = victim.read_bytes()
    os.utime(victim, (1e9, 1e9))
    os.link(victim, cache / name)
    with pytest.raises(InvalidArgumentError, match=rf"{cache / name} is a hard link \(one of 2 names of a file\)"):
        ds, _ = _dataset(path, cache, persist=True)
        _epoch(ds, values)
    assert victim.read_bytes() == before and victim.stat().st_mtime == 1e9


@pytest.mark.parametrize("name", [".insitu.readers", "insitu_cache.jsonl"])
def test_a_reader_follows_no_planted_symlink(era, tmp_path, name):
    """A dangling link: a reader creating its target would write outside the directory."""
    path, values = era
    cache = tmp_path / "cache"
    _warm(path, values, cache)
    target = tmp_path / "created-through-the-link"
    (cache / name).unlink(missing_ok=True)
    (cache / name).symlink_to(target)
    with pytest.raises(InvalidArgumentError, match=rf"{cache / name} is a symbolic link"):
        _dataset(path, cache, readonly_cache=True)
    assert not target.exists()


def test_a_chunk_file_replaced_by_a_link_is_never_read_or_written_through(era, tmp_path):
    path, values = era
    cache = tmp_path / "cache"
    _warm(path, values, cache)
    outside = tmp_path / "outside"
    outside.mkdir()
    name = _chunk_files(cache)[0]
    shutil.move(cache / name, outside / name)  # the same bytes, now behind a link
    (cache / name).symlink_to(outside / name)
    before = (outside / name).read_bytes()
    reader, _ = _dataset(path, cache, readonly_cache=True)
    with pytest.raises(NotFoundError, match="is not in the cache"):
        _epoch(reader, values)
    reader.close()
    ds, store = _dataset(path, cache, persist=True)
    assert _epoch(ds, values) == 48 and _chunk_reads(store) == 1  # a miss, read again
    ds.close()
    assert not (cache / name).is_symlink() and (outside / name).read_bytes() == before


def test_a_cache_file_whose_bytes_changed_is_read_again_never_served(era, tmp_path):
    """What a power loss can leave (nothing is fsynced): a file of the right size whose
    pages are zeros. Its checksum tells: a miss, read again, counted. (Files written since
    the machine booted lost nothing to a crash and are not checked: the log is made to say
    another boot wrote these.)"""
    path, values = era
    cache = tmp_path / "cache"
    _warm(path, values, cache)
    log = cache / "insitu_cache.jsonl"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert log.read_text().count(f'"boot":"{boot}"') == 24
    log.write_text(log.read_text().replace(boot, "00000000-0000-0000-0000-000000000000"))
    name = _chunk_files(cache)[0]
    data = (cache / name).stat().st_size - 4096  # past the header: the chunk's values, zeroed
    with open(cache / name, "r+b") as f:
        f.seek(4096)
        f.write(bytes(data))
    ds, store = _dataset(path, cache, persist=True)
    assert _epoch(ds, values) == 48  # every value checked
    assert ds.last_pass.revive_rejected == 1 and _chunk_reads(store) == 1
    assert ds._engine.cache_counters()["revive_corrupt"] == 1
    ds.close()
    ds, store = _dataset(path, cache, persist=True)  # written again, whole: all revived
    assert _epoch(ds, values) == 48 and _chunk_reads(store) == 0 and ds.last_pass.revive_rejected == 0
    ds.close()


def test_large_cache_files_revive_with_their_checksum(tmp_path):
    """Chunks past the checksum's three-lane threshold (1,042,560 bytes each) revive in
    another boot with the sum logged as they were written, and a changed last byte is caught."""
    import zarr
    from zarr.codecs import ZstdCodec

    path, cache = tmp_path / "big.zarr", tmp_path / "cache"
    values = np.random.default_rng(2).standard_normal((16, 181, 360)).astype("f4")
    zarr.create_array(zarr.storage.LocalStore(path), name="t2m", shape=values.shape, chunks=(4, 181, 360),
                      dtype="f4", compressors=[ZstdCodec(level=1)], fill_value=0)[...] = values

    def epoch() -> tuple:
        ds, store = _dataset(path, cache, persist=True, variables=["t2m"])
        assert _epoch(ds, {"t2m": values}) == 12
        stats = ds.last_pass
        ds.close()
        return stats.revived, stats.revive_rejected, _chunk_reads(store)

    assert epoch() == (0, 0, 3)
    log = cache / "insitu_cache.jsonl"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    log.write_text(log.read_text().replace(boot, "00000000-0000-0000-0000-000000000000"))
    assert epoch() == (3, 0, 0)  # every file checked, every sum whole
    log.write_text(log.read_text().replace(boot, "00000000-0000-0000-0000-000000000000"))
    name = _chunk_files(cache)[0]
    with open(cache / name, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    assert epoch() == (2, 1, 1)


def test_a_fifo_at_the_log_is_refused_without_hanging(era, tmp_path):
    path, _ = era
    cache = tmp_path / "cache"
    cache.mkdir()
    os.mkfifo(cache / "insitu_cache.jsonl")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_cache_dir import _dataset, _epoch, _write
        from pathlib import Path
        import numpy as np, zarr
        values = {{k: zarr.open_array(zarr.storage.LocalStore({str(path)!r}), path=k, mode="r")[...]
                  for k in ("t2m", "u10")}}
        try:
            ds, _ = _dataset({str(path)!r}, {str(cache)!r}, persist=True)
            _epoch(ds, values)
        except Exception as e:
            print(type(e).__name__, e)
    """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    except subprocess.TimeoutExpired:
        pytest.fail("the writer hung on a FIFO at the log's name")
    assert f"InvalidArgumentError {cache / 'insitu_cache.jsonl'} is a FIFO, not a regular file" in out, out


def test_a_users_files_beside_the_cache_are_never_touched(era, tmp_path):
    path, values = era
    cache = tmp_path / "cache"
    cache.mkdir()
    mine = {"my_features.npy": b"features", "labels.npy": b"labels", "t2m.0.npy": b"x",
            "notes.insitu-tmp": b"notes", "t2m.00000000.0.npy.1.2.insitu-tmp.bak": b"y"}
    for name, data in mine.items():
        (cache / name).write_bytes(data)
    _warm(path, values, cache)
    ds, store = _dataset(path, cache, persist=True)
    assert _epoch(ds, values) == 48 and _chunk_reads(store) == 0
    ds.close()
    for name, data in mine.items():
        assert (cache / name).read_bytes() == data, name
    # A tampered log naming a user's file under a chunk's key: reset drops the entry, not the file.
    log = cache / "insitu_cache.jsonl"
    log.write_text(log.read_text() + '{"key": "t2m#0", "file": "labels.npy", "bytes": 6, "tag": "old"}\n')
    ds, _ = _dataset(path, cache, persist=True, reset_stale_cache=True)
    assert _epoch(ds, values) == 48
    ds.close()
    assert (cache / "labels.npy").read_bytes() == b"labels"
    assert "labels.npy" not in log.read_text()


def test_a_reader_over_a_copy_without_the_dot_files_writes_nothing(era, tmp_path):
    path, values = era
    cache = tmp_path / "cache"
    _warm(path, values, cache)
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in cache.iterdir():
        if not p.name.startswith("."):
            shutil.copy2(p, copy / p.name)
    before = sorted(p.name for p in copy.iterdir())
    ds, store = _dataset(path, copy, readonly_cache=True)
    assert _epoch(ds, values) == 48 and _chunk_reads(store) == 0
    ds.close()
    assert sorted(p.name for p in copy.iterdir()) == before


@pytest.fixture
def tmpfs(tmp_path):
    where = tmp_path / "mnt"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _remount_read_only(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True, capture_output=True)


def test_a_reader_works_on_a_read_only_mount(era, tmpfs, caplog):
    path, values = era
    cache = tmpfs / "cache"
    _warm(path, values, cache)
    _remount_read_only(tmpfs)
    with caplog.at_level(logging.WARNING, logger="insitubatch"):
        ds, store = _dataset(path, cache, readonly_cache=True)
        assert _epoch(ds, values) == 48 and _chunk_reads(store) == 0
    ds.close()
    assert not any("advisory" in r.getMessage() for r in caplog.records)


def test_a_writer_on_a_read_only_mount_fails_naming_it_without_blaming_locks(era, tmpfs, caplog):
    path, values = era
    cache = tmpfs / "cache"
    cache.mkdir()
    _remount_read_only(tmpfs)
    with caplog.at_level(logging.WARNING, logger="insitubatch"):
        with pytest.raises(OSError, match=rf"{cache}/\.insitu\.lock.*Read-only file system"):
            _dataset(path, cache, persist=True)
    assert not any("advisory" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("remove", ["contents", "directory"])
def test_a_writer_recovers_when_its_directory_is_emptied(era, tmp_path, remove):
    path, values = era
    cache = tmp_path / "cache"
    ds, _ = _dataset(path, cache, persist=True)
    assert _epoch(ds, values) == 48
    if remove == "directory":
        shutil.rmtree(cache)
    else:
        for p in cache.iterdir():
            p.unlink()
    n = 0
    for batch in ds.val:  # chunks never read before: their writes recreate what they need
        for label, arr in batch.arrays.items():
            np.testing.assert_array_equal(arr, values[label][batch.read_indices(label)])
        n += len(batch.sample_indices)
    assert n == 16
    assert sorted(p.name for p in cache.iterdir() if p.name.startswith(".")) == [".insitu.lock", ".insitu.readers"]
    ds.close()
    assert len(_chunk_files(cache)) == 8  # 4 val chunks x 2 arrays, logged
    again, store = _dataset(path, cache, persist=True)
    assert sum(len(b.sample_indices) for b in again.val) == 16
    assert _chunk_reads(store) == 0 and again.last_pass.revived == 8


def test_a_cache_dir_whose_parent_is_missing_is_a_clear_error(era, tmp_path):
    path, _ = era
    cache = tmp_path / "no" / "such" / "cache"
    with pytest.raises(NotFoundError, match=rf"cache_dir {cache}: its parent directory {cache.parent} does not exist"):
        _dataset(path, cache, persist=True)
    assert not (tmp_path / "no").exists()
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(InvalidArgumentError, match=rf"cache_dir {afile} is not a directory"):
        _dataset(path, afile, persist=True)
