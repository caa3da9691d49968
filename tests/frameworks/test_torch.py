"""The PyTorch adapter against real torch: DLPack zero copy on the CPU, buffer lifetime, the
DataLoader surface, a model that learns, and the CUDA copy path (GPU only)."""

from __future__ import annotations

import gc
import logging
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fwtest_util import add_index, expected, first_batch, run_python, run_torchrun, run_without  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import insitubatch  # noqa: E402
from insitubatch import Batch, as_torch, to_torch  # noqa: E402
from insitubatch.frameworks import torch as torch_adapter  # noqa: E402

TORCH_DTYPES = {"x": torch.float32, "label": torch.int64, "mask": torch.bool, "code": torch.uint8}


def test_to_torch_is_zero_copy_with_exact_values(mixed):
    open_dataset, sources = mixed
    ds = open_dataset()
    batch = first_batch(ds.train)
    tensors = to_torch(batch)
    assert set(tensors) == set(batch.arrays) == set(sources)  # sample_indices/offsets stay on the Batch
    for label, t in tensors.items():
        arr = batch.arrays[label]
        assert isinstance(t, torch.Tensor)
        assert t.device.type == "cpu"
        assert t.dtype == TORCH_DTYPES[label]
        assert tuple(t.shape) == arr.shape == (6, *sources[label].shape[1:])
        assert t.data_ptr() == arr.ctypes.data  # the engine's batch buffer, no copy
        assert t.data_ptr() % 128 == 0
        np.testing.assert_array_equal(t.numpy(), expected(sources, batch, label), strict=True)


def test_cpu_device_means_zero_copy(mixed):
    open_dataset, _ = mixed
    batch = first_batch(open_dataset().val)
    for device in ("cpu", torch.device("cpu")):
        tensors = to_torch(batch, device=device)
        assert all(t.data_ptr() == batch.arrays[k].ctypes.data for k, t in tensors.items())


def test_tensor_outlives_dataset_and_batch(mixed):
    open_dataset, sources = mixed
    ds = open_dataset()
    batch = first_batch(ds.train)
    want = {label: expected(sources, batch, label) for label in sources}
    tensors = to_torch(batch)
    ptrs = {label: t.data_ptr() for label, t in tensors.items()}
    probe = weakref.ref(batch.arrays["x"])
    del ds, batch
    gc.collect()
    assert probe() is not None  # torch holds the numpy array, which holds the C++ buffer
    # Churn the allocator: a second dataset's batches would land on freed memory.
    for b in open_dataset().all:
        b.arrays["x"][...] = -1.0
    for label, t in tensors.items():
        assert t.data_ptr() == ptrs[label]
        np.testing.assert_array_equal(t.numpy(), want[label], strict=True)
    del tensors, t
    gc.collect()
    assert probe() is None  # and the last tensor gone releases it


def test_held_buffer_is_not_recycled_until_torch_releases_it(mixed):
    open_dataset, sources = mixed
    ds = open_dataset(batch_size=8)
    it = iter(ds.train)
    first = next(it)
    held = to_torch(first)["x"]
    want = expected(sources, first, "x")
    held_ptr = held.data_ptr()
    del first
    later = []
    for batch in it:
        later.append(batch.arrays["x"].ctypes.data)
        del batch  # each later buffer returns to the pool at once, to be reused
    # The pool never handed out the buffer torch still holds, so no later batch overwrote it.
    assert held_ptr not in later
    np.testing.assert_array_equal(held.numpy(), want, strict=True)


def test_dataloader_round_trip_equals_source(mixed):
    open_dataset, sources = mixed
    ds = open_dataset(batch_transforms=[add_index])
    loader = DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)
    assert len(loader) == len(ds.train)
    for epoch in range(2):
        ds.set_epoch(epoch)
        seen = []
        for item in loader:
            idx = item.pop("idx").numpy()
            seen.append(idx)
            assert set(item) == set(sources)
            for label, t in item.items():
                assert t.dtype == TORCH_DTYPES[label]
                np.testing.assert_array_equal(t.numpy(), sources[label][idx], strict=True)
        seen = np.concatenate(seen)
        assert sorted(seen.tolist()) == list(range(64))  # train = chunks 0..7, each sample once
    assert ds.last_pass is not None and ds.last_pass.epoch == 1


def test_dataloader_yields_the_raw_batches_aligned(mixed):
    open_dataset, _ = mixed
    ds = open_dataset()
    raw = [b.arrays["x"].copy() for b in ds.val]
    got = [item["x"] for item in DataLoader(as_torch(ds.val), batch_size=None, num_workers=0)]
    assert len(got) == len(raw) == len(ds.val)
    for r, t in zip(raw, got):
        np.testing.assert_array_equal(t.numpy(), r, strict=True)
        assert t.data_ptr() % 128 == 0


def test_early_break_closes_the_pass(mixed):
    open_dataset, _ = mixed
    ds = open_dataset()
    loader = DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)
    for _ in loader:
        break
    gc.collect()
    assert ds.last_pass is not None  # the pass was closed (its stats recorded), not leaked
    assert ds.last_pass.batches <= len(ds.train)
    assert len(list(loader)) == len(ds.train)  # and the view is re-iterable


@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_dataloader_workers_share_the_chunks_every_sample_once(mixed, method):
    open_dataset, sources = mixed
    ds = open_dataset(batch_transforms=[add_index])
    ds.set_epoch(2)
    loader = DataLoader(as_torch(ds.train), batch_size=None, num_workers=2,
                        multiprocessing_context=method)
    seen = []
    for item in loader:
        idx = item.pop("idx").numpy()
        seen.append(idx)
        for label, t in item.items():
            np.testing.assert_array_equal(t.numpy(), sources[label][idx], strict=True)
        # Each worker batches its own whole chunks (every other one of chunks 0..7).
        assert len({int(i) // 8 % 2 for i in idx}) == 1
    seen = np.concatenate(seen)
    assert sorted(seen.tolist()) == list(range(64))  # every train sample once


def test_a_device_copy_in_a_worker_is_refused(mixed, monkeypatch):
    open_dataset, _ = mixed
    dataset = as_torch(open_dataset().train, device="meta")
    monkeypatch.setattr(torch.utils.data, "get_worker_info",
                        lambda: type("W", (), {"id": 0, "num_workers": 2})())
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(iter(dataset))


def test_as_torch_argument_checks(mixed):
    open_dataset, _ = mixed
    view = open_dataset().train
    with pytest.raises(ValueError, match="pin_budget_bytes"):
        as_torch(view, pin_budget_bytes=-1)
    with pytest.raises(TypeError, match="pin_budget_bytes"):
        as_torch(view, pin_budget_bytes=1.5)
    with pytest.raises(TypeError, match="Batch"):
        to_torch({"x": np.zeros(3)})
    assert isinstance(as_torch(view), torch.utils.data.IterableDataset)


def test_transform_output_dlpack_refuses_is_copied():
    base = np.arange(24, dtype="f4").reshape(4, 6)
    swapped = base.astype(">f4")  # DLPack has no byte order
    strided = base[:, ::2]
    readonly = base.copy()
    readonly.setflags(write=False)
    tensors = to_torch(Batch({"s": swapped, "t": strided, "r": readonly}, np.arange(4)))
    np.testing.assert_array_equal(tensors["s"].numpy(), base)
    np.testing.assert_array_equal(tensors["t"].numpy(), strided)
    np.testing.assert_array_equal(tensors["r"].numpy(), base)


def test_linear_model_learns_from_the_store(linear):
    torch.manual_seed(0)
    ds = linear()
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)
    losses = []
    for epoch in range(4):
        ds.set_epoch(epoch)
        for item in loader:
            loss = torch.nn.functional.mse_loss(model(item["features"]), item["target"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert len(losses) == 4 * len(ds.train)
    assert np.mean(losses[-3:]) < 0.01 * np.mean(losses[:3])
    with torch.no_grad():
        val = [torch.nn.functional.mse_loss(model(b["features"]), b["target"]).item()
               for b in DataLoader(as_torch(ds.val), batch_size=None, num_workers=0)]
    assert max(val) < 0.01


# -- the CUDA copy path's bookkeeping, exercised on the CPU with stand-in events ------------

class FakeEvent:
    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True


class CpuFeeder(torch_adapter._DeviceFeeder):
    """The real feeder with its four device operations replaced by CPU equivalents."""

    def __init__(self, **kwargs) -> None:
        super().__init__(torch, torch.device("cuda"), **kwargs)
        self.events: list[FakeEvent] = []
        self.pinned: list[int] = []

    def _is_pinned(self, host) -> bool:
        return host.data_ptr() in self.pinned

    def _pin(self, host):
        staged = host.clone()
        self.pinned.append(staged.data_ptr())
        return staged

    def _copy(self, host):
        return host.clone()

    def _record_event(self):
        self.events.append(FakeEvent())
        return self.events[-1]


def test_device_copy_holds_sources_until_its_event_completes(mixed):
    open_dataset, sources = mixed
    ds = open_dataset()
    feeder = CpuFeeder()
    it = iter(ds.train)
    batch = next(it)
    want = expected(sources, batch, "x")
    probe = weakref.ref(batch.arrays["x"])
    out = feeder.convert(batch.arrays)
    del batch
    gc.collect()
    np.testing.assert_array_equal(out["x"].numpy(), want, strict=True)
    assert probe() is not None and len(feeder.inflight) == 1  # copy not known done: held
    feeder.convert(next(it).arrays)
    gc.collect()
    assert probe() is not None and len(feeder.inflight) == 2
    feeder.events[0].done = True
    feeder.convert(next(it).arrays)  # each convert first drops what has finished
    gc.collect()
    assert probe() is None and len(feeder.inflight) == 2
    feeder.inflight.drain()
    assert len(feeder.inflight) == 0 and all(e.done for e in feeder.events)
    it.close()


def test_pin_budget_warns_once_and_falls_back_to_pageable(mixed, caplog):
    open_dataset, _ = mixed
    batches = list(open_dataset(batch_size=8).train)
    nbytes = sum(a.nbytes for a in batches[0].arrays.values())
    feeder = CpuFeeder(pin=True, pin_budget_bytes=nbytes + nbytes // 2)
    assert feeder.pin
    with caplog.at_level(logging.WARNING, logger="insitubatch"):
        feeder.convert(batches[0].arrays)
        assert feeder.inflight.pinned_bytes == nbytes and len(feeder.pinned) == 4
        feeder.convert(batches[1].arrays)  # the first is still in flight: over budget
        feeder.convert(batches[2].arrays)
        assert feeder.inflight.pinned_bytes == nbytes and len(feeder.pinned) == 4
        feeder.events[0].done = True
        feeder.convert(batches[3].arrays)  # back within the budget once the first is done
        assert feeder.inflight.pinned_bytes == nbytes and len(feeder.pinned) == 8
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "pin_budget_bytes" in warnings[0].getMessage()


def test_engine_locked_batches_are_copied_in_place(mixed, caplog):
    from page_lock_fake import FakeCudart  # tests/: a recording stand-in for cudaHostRegister

    open_dataset, sources = mixed
    ds = open_dataset(batch_size=8, batch_transforms=[add_index])
    cudart = FakeCudart()
    pages = torch_adapter._EnginePages.attach(ds.train, 1 << 30, cudart.functions)
    feeder = CpuFeeder(pin=True, pin_budget_bytes=1 << 30, pages=pages)
    with caplog.at_level(logging.WARNING, logger="insitubatch"):
        for batch in ds.train:
            staged_before = len(feeder.pinned)
            out = feeder.convert(batch.arrays)
            # The engine's buffers go as they are; only the batch transform's new array is staged.
            assert len(feeder.pinned) == staged_before + 1
            for label in sources:
                assert ds._batch_pages_locked(batch.arrays[label])
                np.testing.assert_array_equal(out[label].numpy(), sources[label][out["idx"].numpy()],
                                              strict=True)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    assert cudart.locked_bytes() == ds.pool_state()["batch_locked_bytes"] > 0
    feeder.inflight.drain()


def test_engine_locking_past_the_budget_warns_once_and_copies_pageable(mixed, caplog):
    from page_lock_fake import FakeCudart

    open_dataset, _ = mixed
    ds = open_dataset(batch_size=8)
    budget = 2 * 4 * 4096  # two batches of four arrays, each in a 4 KiB buffer
    pages = torch_adapter._EnginePages.attach(ds.train, budget, FakeCudart().functions)
    feeder = CpuFeeder(pin=True, pin_budget_bytes=budget, pages=pages)
    with caplog.at_level(logging.WARNING, logger="insitubatch"):
        for batch in ds.train:  # no event completes: every batch stays held, none recycled
            feeder.convert(batch.arrays)
    assert feeder.pinned == []  # nothing staged: locked in place, or pageable past the budget
    assert ds.pool_state()["batch_locked_bytes"] == budget
    assert ds.pool_state()["batch_unlocked_takes"] > 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "pin_budget_bytes" in warnings[0].getMessage()
    feeder.inflight.drain()


def test_views_of_other_iterables_are_staged_instead():
    assert torch_adapter._EnginePages.attach([1, 2], 1 << 20, (1, 2)) is None


def test_default_pin_budget_is_an_eighth_of_the_machines_memory():
    from insitubatch import _ext
    from insitubatch.frameworks import default_pin_budget_bytes

    assert default_pin_budget_bytes() == _ext.machine_memory_bytes() // 8
    assert CpuFeeder(pin=True).pin_budget_bytes == default_pin_budget_bytes()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_round_trip_is_exact(mixed):
    open_dataset, sources = mixed
    ds = open_dataset(batch_transforms=[add_index])
    n = 0
    for item in DataLoader(as_torch(ds.train, device="cuda"), batch_size=None, num_workers=0):
        idx = item.pop("idx").cpu().numpy()
        for label, t in item.items():
            assert t.device.type == "cuda"
            np.testing.assert_array_equal(t.cpu().numpy(), sources[label][idx], strict=True)
        n += len(idx)
    assert n == 64
    batch = first_batch(ds.val)
    for label, t in to_torch(batch, device="cuda").items():
        np.testing.assert_array_equal(t.cpu().numpy(), batch.arrays[label], strict=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_copies_read_engine_buffers_locked_in_place(mixed):
    assert torch_adapter.cudart_host_register(torch) is not None, "libcudart not found in the process"
    open_dataset, sources = mixed
    ds = open_dataset()
    seen = 0
    for item in DataLoader(as_torch(ds.train, device="cuda"), batch_size=None, num_workers=0):
        seen += len(item["x"])
    assert seen == 64
    assert ds.pool_state()["batch_locked_bytes"] > 0
    batch = first_batch(ds.train)
    for label, arr in batch.arrays.items():
        assert ds._batch_pages_locked(arr)
        assert torch.from_dlpack(arr).is_pinned()  # CUDA agrees the memory is page-locked
    out = to_torch(batch, device="cuda")
    for label, t in out.items():
        np.testing.assert_array_equal(t.cpu().numpy(), batch.arrays[label], strict=True)


# -- the import rule -----------------------------------------------------------------------

def test_missing_torch_names_the_extra():
    for call in ("insitubatch.to_torch(batch)", "insitubatch.as_torch([batch])"):
        message = run_without("torch", call)
        assert ("insitubatch.frameworks needs PyTorch; install it with:"
                " pip install 'insitubatch[torch]'") in message


def test_import_insitubatch_imports_no_framework():
    run_python("""
        import sys, insitubatch
        adapters = (insitubatch.to_torch, insitubatch.as_torch, insitubatch.to_jax, insitubatch.to_tf,
                    insitubatch.as_tf_dataset)
        assert set(insitubatch.__all__) >= {f.__name__ for f in adapters}
        loaded = [m for m in ("torch", "jax", "tensorflow") if m in sys.modules]
        assert not loaded, loaded
    """)


def test_a_record_array_goes_out_as_one_tensor_per_field():
    dtype = np.dtype([("flux", "<f4"), ("flag", ">i2"), ("lines", "<f8", (3,))])
    x = np.zeros(6, dtype)
    x["flux"], x["flag"], x["lines"] = np.arange(6), -np.arange(6), np.arange(18).reshape(6, 3)
    out = to_torch(Batch({"spec": x}))
    assert sorted(out) == ["spec.flag", "spec.flux", "spec.lines"]
    assert out["spec.flag"].dtype == torch.int16 and out["spec.lines"].shape == (6, 3)
    for name in dtype.names:
        np.testing.assert_array_equal(out[f"spec.{name}"].numpy(), x[name])


def test_bfloat16_arrays_become_bfloat16_tensors():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.random.default_rng(1).normal(size=(6, 3)).astype(ml_dtypes.bfloat16)
    tensors = to_torch(Batch({"w": values}, np.arange(6)))
    assert tensors["w"].dtype == torch.bfloat16
    assert torch.equal(tensors["w"].view(torch.int16), torch.from_numpy(values.view(np.int16)))


def test_stateful_dataloader_resumes_exactly_mid_epoch(mixed):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    open_dataset, _ = mixed

    def run(loader, n=None):
        """The batches, and the loader's state taken in the loop right after batch n."""
        out, saved = [], None
        for batch in loader:
            out.append({k: v.clone() for k, v in batch.items()})
            if len(out) == n:
                saved = loader.state_dict()  # as a training loop checkpoints
                break
        return out, saved

    ds = open_dataset(seed=9)
    ds.set_epoch(4)
    full, _ = run(stateful.StatefulDataLoader(as_torch(ds.train), batch_size=None, num_workers=0))
    ds.close()

    ds = open_dataset(seed=9)
    ds.set_epoch(4)
    loader = stateful.StatefulDataLoader(as_torch(ds.train), batch_size=None, num_workers=0)
    head, saved = run(loader, 3)
    ds.close()

    ds = open_dataset(seed=9)  # a new process would start here
    resumed = stateful.StatefulDataLoader(as_torch(ds.train), batch_size=None, num_workers=0)
    resumed.load_state_dict(saved)
    rest, _ = run(resumed)
    assert ds.epoch == 4 and len(head) == 3 and len(head) + len(rest) == len(full)
    for got, want in zip(head + rest, full):
        assert got.keys() == want.keys()
        for label in got:
            assert torch.equal(got[label], want[label]), label
    ds.close()


DDP_SCRIPT = '''
import json, sys
import numpy as np
import torch
import torch.distributed as dist
import insitubatch as ib
from insitubatch import _ext

store_path, out = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
counting = _ext.CountingStore(ib.store(store_path))
geoms = ib.open_geometries(counting, ["x"])
manifest = ib.split_by_chunk(geoms["x"], fractions=(1.0, 0.0, 0.0))
ds = ib.InSituDataset(counting, manifest, geometries=geoms, batch_size=5, block_chunks=2, seed=2)  # rank from torch
steps, seen = 0, []
for epoch in range(2):
    ds.set_epoch(epoch)
    for batch in torch.utils.data.DataLoader(ib.as_torch(ds.train), batch_size=None):
        total = torch.tensor([float(batch["x"].sum())])
        dist.all_reduce(total)  # one collective per step: a rank with a step less would hang here
        steps += 1
        seen.append((epoch, batch["x"][:, 0].tolist()))
chunks = sorted(k for k in counting.reads() if k.startswith("x/c/"))
report = {"rank": ds.rank, "world_size": ds.world_size, "steps": steps, "len": len(ds.train), "seen": seen,
          "chunks": chunks}
gathered = [None] * dist.get_world_size()
dist.all_gather_object(gathered, report)
if dist.get_rank() == 0:
    json.dump(gathered, open(out, "w"))
dist.destroy_process_group()
'''


def test_torchrun_ranks_take_equal_steps_and_read_disjoint_chunks(tmp_path):
    import json

    import zarr

    n, spc = 97, 8  # 13 chunks, the last short: 3 ranks cannot share them evenly
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    root.create_array("x", shape=(n, 2), chunks=(spc, 2), dtype="f8")[...] = np.arange(2 * n).reshape(n, 2)
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    out = tmp_path / "report.json"
    run_torchrun(script, tmp_path / "s.zarr", out)
    reports = json.loads(out.read_text())
    assert [r["rank"] for r in reports] == [0, 1, 2] and {r["world_size"] for r in reports} == {3}
    assert len({r["steps"] for r in reports}) == 1 and reports[0]["steps"] == 2 * reports[0]["len"] > 0
    for a in range(3):
        for b in range(a + 1, 3):
            assert not set(reports[a]["chunks"]) & set(reports[b]["chunks"])
    for epoch in range(2):
        rows = [int(v) // 2 for r in reports for e, xs in r["seen"] if e == epoch for v in xs]
        assert len(rows) == len(set(rows)) and set(rows) <= set(range(n))  # remainder="drop": disjoint


def test_patch_batches_go_out_in_their_patch_shape(tmp_path):
    import zarr

    values = np.random.default_rng(2).standard_normal((8, 20, 18)).astype("f4")
    root = zarr.open_group(str(tmp_path / "p.zarr"), mode="w", zarr_format=3)
    root.create_array("img", shape=values.shape, chunks=(2, 10, 9), dtype="f4",
                      dimension_names=("t", "y", "x"))[...] = values
    store = insitubatch.store(str(tmp_path / "p.zarr"))
    geoms = insitubatch.open_geometries(store, ["img"])
    manifest = insitubatch.split_by_chunk(geoms["img"], fractions=(1.0, 0.0, 0.0))

    def with_origins(batch):  # a batch transform carries each row's place along
        batch.arrays["origin"] = batch.patch_origins
        batch.arrays["t"] = batch.sample_indices
        return batch

    ds = insitubatch.InSituDataset(store, manifest, geoms, batch_size=5, patch={"y": 10, "x": 6},
                                   batch_transforms=[with_origins])
    loader = DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)
    assert len(loader) == len(ds.train) == -(-8 * 2 * 3 // 5)
    n = 0
    for item in loader:
        assert item["img"].dtype == torch.float32 and tuple(item["img"].shape[1:]) == (10, 6)
        for img, (y, x), t in zip(item["img"].numpy(), item["origin"].numpy(), item["t"].numpy()):
            np.testing.assert_array_equal(img, values[t, y:y + 10, x:x + 6])
            n += 1
    assert n == 8 * 2 * 3
