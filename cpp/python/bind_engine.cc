// Engine bindings: the dataset-owned Engine and its passes. Every blocking call releases
// the GIL; batches reach Python as numpy arrays that own their C++ buffer (zero copy), and
// the buffer returns to the engine's recycling pool when the last reference goes.

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "bind_transforms.h"
#include "bindings.h"
#include "insitubatch/engine/engine.h"

namespace insitubatch::python {
namespace {

using engine::BatchData;
using engine::Engine;
using engine::Pass;
using engine::PassStats;

// Page-locks through two C functions shaped like the CUDA runtime's
//   int cudaHostRegister(void* ptr, size_t size, unsigned flags);  int cudaHostUnregister(void* ptr);
// whose addresses the torch adapter takes from the libcudart torch loaded (0 = success). No
// CUDA headers or link dependency, and no GIL: the calls come from engine threads.
class FunctionRegistrar final : public HostRegistrar {
 public:
  using RegisterFn = int (*)(void*, size_t, unsigned);
  using UnregisterFn = int (*)(void*);
  FunctionRegistrar(RegisterFn register_fn, UnregisterFn unregister_fn)
      : register_(register_fn), unregister_(unregister_fn) {}
  bool Register(std::byte* data, size_t size) override { return register_(data, size, kPortable) == 0; }
  void Unregister(std::byte* data) override { unregister_(data); }

 private:
  static constexpr unsigned kPortable = 1;  // cudaHostRegisterPortable: locked for every context
  RegisterFn register_;
  UnregisterFn unregister_;
};

// Python-side owners: the engine and its passes are shared with C++ threads, so Python
// holds shared_ptr handles rather than the objects themselves.
struct EngineHandle {
  std::shared_ptr<Engine> engine;
  // The engine's end waits for its reads, whose chunk transforms may need the GIL.
  ~EngineHandle() {
    if (engine) {
      nb::gil_scoped_release release;
      engine.reset();
    }
  }
};

struct PassHandle {
  std::shared_ptr<Pass> pass;
  ~PassHandle() {
    if (pass) {
      nb::gil_scoped_release release;
      pass->Close();
      pass.reset();
    }
  }
};

// An integer option set from Python: an int (or numpy integer, never a bool or a float)
// within the option's limits, with the messages the Python API has always given.
uint32_t OptionInteger(const engine::OptionLimit& limit, nb::handle value) {
  const std::string range = "[" + std::to_string(limit.lo) + ", " + std::to_string(limit.hi) + "]";
  if (!PyBool_Check(value.ptr())) {
    if (PyObject* index = PyNumber_Index(value.ptr())) {
      int overflow = 0;
      const long long number = PyLong_AsLongLongAndOverflow(index, &overflow);
      Py_DECREF(index);
      if (overflow != 0) {
        ThrowIfError(InvalidArgument(std::string(limit.name) + " must be in " + range + ", got " +
                                     nb::cast<std::string>(nb::str(value))));
      }
      ThrowIfError(engine::CheckLimit(limit, number));
      return static_cast<uint32_t>(number);
    }
    PyErr_Clear();
  }
  // A wrong type is InvalidTypeError (also a TypeError), as every argument check says it.
  const std::string message = std::string(limit.name) + " must be an integer in " + range + ", got " +
                              nb::cast<std::string>(nb::repr(value)) + " (" +
                              nb::cast<std::string>(nb::str(value.type().attr("__name__"))) + ")";
  nb::object type_error = nb::module_::import_("insitubatch.errors").attr("InvalidTypeError");
  PyErr_SetObject(type_error.ptr(), nb::str(message.c_str()).ptr());
  throw nb::python_error();
  return 0;
}

// The text of an enum option: a str, else what str() makes of it (refused by the parser).
std::string OptionText(nb::handle value) { return nb::cast<std::string>(nb::str(value)); }

}  // namespace

void BindEngine(nb::module_& m) {
  nb::class_<PassHandle>(m, "Pass", "One iteration over one split view.")
      .def(
          "next",
          [](PassHandle& h) -> nb::object {
            if (!h.pass) ThrowIfError(FailedPrecondition("the pass is closed"));
            Pass& pass = *h.pass;
            // While it waits, signal handlers get to run (Ctrl-C): their exception ends
            // the wait and is raised here; the pass stays open for the caller to close.
            bool interrupted = false;
            Result<std::optional<BatchData>> next = [&] {
              GilRelease release;
              return pass.Next([&interrupted]() -> Status {
                if (!SignalRaised()) return Status::Ok();
                interrupted = true;
                return Cancelled("interrupted");
              });
            }();
            if (interrupted) throw nb::python_error();
            std::optional<BatchData> batch = ValueOrThrow(std::move(next));
            if (!batch) return nb::none();
            nb::list arrays;
            for (size_t l = 0; l < batch->arrays.size(); ++l) {
              const engine::Label& label = pass.labels()[l];
              const auto& source = pass.sources()[label.source];
              std::vector<uint64_t> shape{batch->rows};
              for (uint64_t e : engine::RowShape(source, label, pass.patches())) shape.push_back(e);
              arrays.append(SharedToNumpy(std::move(batch->arrays[l]), shape, source.resident.dtype));
            }
            const zarr::DataType int64{zarr::DataTypeId::kInt64};
            auto anchors = ValueOrThrow(Buffer::Allocate(batch->rows * sizeof(int64_t)));
            std::memcpy(anchors.data(), batch->anchors.data(), batch->rows * sizeof(int64_t));
            nb::object indices = BufferToNumpy(std::move(anchors), {batch->rows}, int64);
            nb::object origins = nb::none();
            if (!batch->origins.empty()) {
              auto o = ValueOrThrow(Buffer::Allocate(batch->origins.size() * sizeof(int64_t)));
              std::memcpy(o.data(), batch->origins.data(), batch->origins.size() * sizeof(int64_t));
              origins = BufferToNumpy(std::move(o), {batch->rows, pass.patches().axes()}, int64);
            }
            nb::object filled = nb::none();
            if (!batch->filled.empty()) {
              nb::list masks;
              const zarr::DataType boolean{zarr::DataTypeId::kBool};
              for (const std::vector<uint8_t>& rows : batch->filled) {
                auto mask = ValueOrThrow(Buffer::Allocate(rows.size()));
                std::memcpy(mask.data(), rows.data(), rows.size());
                masks.append(BufferToNumpy(std::move(mask), {batch->rows}, boolean));
              }
              filled = masks;
            }
            return nb::make_tuple(arrays, indices, origins, filled);
          },
          "The next batch as ([arrays per label], sample_indices, patch origins or None, [per label, the rows\n"
          "filled in for a bad chunk] or None), or None at the end.")
      .def(
          "close",
          [](PassHandle& h, const std::string& reason) {
            if (!h.pass) return;
            GilRelease release;
            h.pass->Close(reason);
          },
          nb::arg("reason") = "the pass was closed",
          "Cancels the pass and releases its pins, promptly (idempotent); a next() waiting on\n"
          "another thread raises CancelledError(reason).")
      .def(
          "set_next_order",
          [](PassHandle& h, const Int64Array& rows, const Int64Array& block_start) {
            if (!h.pass) return;  // closed: nothing left to evict for
            const engine::EpochOrder next = OrderFromArrays(rows, block_start);
            GilRelease release;
            h.pass->SetNextOrder(next);
          },
          nb::arg("rows"), nb::arg("block_start"),
          "The view's order next epoch, for a pass started with next_order_later (once; later\n"
          "calls are ignored).")
      .def(
          "stats", [](const PassHandle& h) { return h.pass->stats(); }, "What the pass did so far (PassStats).")
      .def(
          "trace",
          [](const PassHandle& h) -> nb::object {
            if (!h.pass || !h.pass->trace()) return nb::none();
            std::vector<std::string> sources;
            for (const auto& source : h.pass->sources()) sources.push_back(source.path());
            return TraceToPython(*h.pass->trace(), engine::kPassEventNames, sources);
          },
          "What a recorded pass recorded so far (see TraceToPython in bindings.h), or None when\n"
          "its spec did not ask for a trace.")
      .def_prop_ro("n_batches", [](const PassHandle& h) { return h.pass->plan().batches(); })
      .def_prop_ro("n_rows", [](const PassHandle& h) { return h.pass->plan().rows(); });

  using engine::EngineConfig;
  nb::class_<EngineConfig>(m, "EngineConfig",
                           "The engine's options with their defaults and limits (engine/engine.h): each\n"
                           "setter refuses a value outside its limits, validate() checks them together.")
      .def(nb::init<>())
      .def_prop_rw(
          "max_inflight", [](const EngineConfig& c) { return c.max_inflight; },
          [](EngineConfig& c, nb::handle v) { c.max_inflight = OptionInteger(engine::kMaxInflightLimit, v); },
          "Stored-chunk reads from request to decoded tile.")
      .def_prop_rw(
          "decode_threads", [](const EngineConfig& c) { return c.decode_threads; },
          [](EngineConfig& c, nb::handle v) { c.decode_threads = OptionInteger(engine::kDecodeThreadsLimit, v); },
          "0 = one per core.")
      .def_prop_rw(
          "gather_threads", [](const EngineConfig& c) { return c.gather_threads; },
          [](EngineConfig& c, nb::handle v) { c.gather_threads = OptionInteger(engine::kGatherThreadsLimit, v); },
          "0 = one per four decode threads.")
      .def_prop_rw(
          "on_bad_chunk", [](const EngineConfig& c) { return std::string(engine::OnBadChunkName(c.on_bad_chunk)); },
          [](EngineConfig& c, nb::handle v) { c.on_bad_chunk = ValueOrThrow(engine::ParseOnBadChunk(OptionText(v))); },
          "\"raise\" or \"nan\".")
      .def_prop_rw(
          "eviction", [](const EngineConfig& c) { return std::string(engine::EvictionName(c.eviction)); },
          [](EngineConfig& c, nb::handle v) { c.eviction = ValueOrThrow(engine::ParseEviction(OptionText(v))); },
          "\"next_use\" or \"lru\".")
      .def_rw("budget_bytes", &EngineConfig::budget_bytes, "Residency budget; 0 = unbounded.")
      .def_rw("pass_floor_bytes", &EngineConfig::pass_floor_bytes, "The residency one pass needs.")
      .def_rw("auto_budget", &EngineConfig::auto_budget, "The budget grows for concurrent passes.")
      .def_rw("max_auto_budget_bytes", &EngineConfig::max_auto_budget_bytes, "0 = half the machine's memory.")
      .def_prop_rw(
          "cache_dir",
          [](const EngineConfig& c) -> std::optional<std::string> {
            if (c.disk_cache.dir.empty()) return std::nullopt;
            return c.disk_cache.dir;
          },
          [](EngineConfig& c, std::optional<std::string> dir) { c.disk_cache.dir = dir.value_or(""); },
          "The disk tier's directory (None: no disk tier).")
      .def_prop_rw(
          "persist", [](const EngineConfig& c) { return c.disk_cache.persist; },
          [](EngineConfig& c, bool v) { c.disk_cache.persist = v; })
      .def_prop_rw(
          "readonly_cache", [](const EngineConfig& c) { return c.disk_cache.read_only; },
          [](EngineConfig& c, bool v) { c.disk_cache.read_only = v; })
      .def_prop_rw(
          "reset_stale_cache", [](const EngineConfig& c) { return c.disk_cache.reset_stale; },
          [](EngineConfig& c, bool v) { c.disk_cache.reset_stale = v; })
      .def_prop_rw(
          "revalidate",
          [](const EngineConfig& c) { return std::string(engine::RevalidateName(c.disk_cache.revalidate)); },
          [](EngineConfig& c, nb::handle v) {
            c.disk_cache.revalidate = ValueOrThrow(engine::ParseRevalidate(OptionText(v)));
          },
          "When cached chunks are checked against their source: \"open\", \"first_use\" or \"never\".")
      .def(
          "validate", [](const EngineConfig& c) { ThrowIfError(c.Validate()); },
          "Raises InvalidArgumentError unless the options hold together (Engine() checks it too).");

  m.def(
      "check_sample_lengths",
      [](const std::vector<std::pair<std::string, int64_t>>& lengths) {
        ThrowIfError(engine::CheckSampleLengths(lengths));
      },
      nb::arg("lengths"),
      "Raises InvalidArgumentError unless every (variable, sample-axis length) has the same length.");

  nb::class_<engine::PassSpec>(m, "PassSpec", "One pass: its view, epoch, order and batches (limits checked in C++).")
      .def(nb::init<>())
      .def_rw("split", &engine::PassSpec::split)
      .def_rw("epoch", &engine::PassSpec::epoch)
      .def_rw("ref_spc", &engine::PassSpec::ref_spc)
      .def_rw("next_order_later", &engine::PassSpec::next_order_later,
              "The next epoch's order comes later, through Pass.set_next_order (eviction by next use).")
      .def_prop_rw(
          "trace_events", [](const engine::PassSpec& s) { return s.trace_events; },
          [](engine::PassSpec& s, nb::handle v) { s.trace_events = TraceEvents(v, TraceRecorder::kDefaultCapacity); },
          "Record the pass's timeline in a ring of this many events: True for the default ring,\n"
          "False or 0 for none.")
      .def_prop_rw(
          "batch_size", [](const engine::PassSpec& s) { return s.batch_size; },
          [](engine::PassSpec& s, nb::handle v) { s.batch_size = OptionInteger(engine::kBatchSizeLimit, v); })
      .def_prop_rw(
          "prefetch_depth", [](const engine::PassSpec& s) { return s.prefetch_depth; },
          [](engine::PassSpec& s, nb::handle v) { s.prefetch_depth = OptionInteger(engine::kPrefetchDepthLimit, v); },
          "Batches gathered ahead of the consumer.")
      .def_prop_rw(
          "labels",
          [](const engine::PassSpec& s) {
            std::vector<std::tuple<std::string, uint32_t, int64_t>> out;
            for (const engine::Label& l : s.labels) out.emplace_back(l.name, l.source, l.offset);
            return out;
          },
          [](engine::PassSpec& s, const std::vector<std::tuple<std::string, uint32_t, int64_t>>& labels) {
            s.labels.clear();
            for (const auto& [name, source, offset] : labels) s.labels.push_back({name, source, offset, {}, {}});
          },
          "(name, array index, window offset) per label, in gather order.")
      .def(
          "set_patches",
          [](engine::PassSpec& s, const engine::PatchGrid& grid, const std::vector<std::vector<int32_t>>& label_axes,
             const std::vector<nb::bytes>& pads) {
            if (label_axes.size() != s.labels.size()) ThrowIfError(InvalidArgument("patch axes for every label"));
            if (!pads.empty() && pads.size() != s.labels.size()) ThrowIfError(InvalidArgument("a pad for every label"));
            s.patches = grid;
            for (size_t i = 0; i < label_axes.size(); ++i) {
              s.labels[i].patch_axes = label_axes[i];
              if (pads.empty()) continue;
              const auto* pad = reinterpret_cast<const std::byte*>(pads[i].c_str());
              s.labels[i].pad.assign(pad, pad + pads[i].size());
            }
          },
          nb::arg("grid"), nb::arg("label_axes"), nb::arg("pads") = std::vector<nb::bytes>{},
          "Patch samples (set the labels first): per label, per field axis, the patch axis it is\n"
          "cut along or -1. The order's rows are then on the virtual grid (PatchGrid). With\n"
          "patch_edges='pad', `pads` holds per label one element in its batch dtype (b'' when\n"
          "not patched): what a window past the field's end is padded with.")
      .def(
          "set_order",
          [](engine::PassSpec& s, const Int64Array& rows, const Int64Array& block_start) {
            s.order = OrderFromArrays(rows, block_start);
          },
          nb::arg("rows"), nb::arg("block_start"), "This pass's order: (chunk, sample) rows and block starts.")
      .def(
          "validate", [](const engine::PassSpec& s) { ThrowIfError(s.Validate()); },
          "Raises InvalidArgumentError unless the options hold together (start_pass checks it too).");

  nb::class_<EngineHandle>(m, "Engine", "The dataset-owned engine: pool, decode pool, IO budget.")
      .def(
          "__init__",
          [](EngineHandle* self, std::vector<std::shared_ptr<const zarr::Array>> arrays, std::vector<int> sample_axes,
             const EngineConfig& options, nb::list transforms, std::vector<std::string> fingerprints,
             const std::vector<std::pair<std::vector<uint64_t>, std::vector<uint64_t>>>& crops) {
            if (arrays.size() != sample_axes.size() || (transforms.size() != 0 && transforms.size() != arrays.size()) ||
                (!crops.empty() && crops.size() != arrays.size())) {
              ThrowIfError(InvalidArgument("one sample axis per array is required"));
            }
            EngineConfig config = options;
            ThrowIfError(config.Validate());
            std::vector<engine::ArraySource> sources;
            for (size_t i = 0; i < arrays.size(); ++i) {
              std::shared_ptr<const engine::ChunkTransform> transform;
              if (transforms.size() != 0 && !transforms[i].is_none()) {
                transform = nb::cast<const NativeTransform&>(transforms[i]).transform;
              }
              engine::FieldCrop crop;
              if (!crops.empty()) crop = {crops[i].first, crops[i].second};
              sources.push_back(
                  ValueOrThrow(engine::ArraySource::Create(arrays[i], sample_axes[i], std::move(transform), crop)));
            }
            if (!config.disk_cache.dir.empty() && config.backing == nullptr) {
              if (!fingerprints.empty() && fingerprints.size() != sources.size()) {
                ThrowIfError(InvalidArgument("one fingerprint per array is required"));
              }
              std::vector<engine::CachedArray> cached;
              for (size_t i = 0; i < sources.size(); ++i) {
                cached.push_back(engine::CachedArrayOf(sources[i], fingerprints.empty() ? "" : fingerprints[i]));
              }
              nb::gil_scoped_release release;  // file work, perhaps a reset, and the revalidation listings
              config.backing = ValueOrThrow(engine::DiskBacking::Open(config.disk_cache, std::move(cached)));
            }
            new (self) EngineHandle{ValueOrThrow(Engine::Create(std::move(sources), config))};
          },
          nb::arg("arrays"), nb::arg("sample_axes"), nb::arg("config"), nb::arg("transforms") = nb::list(),
          nb::arg("fingerprints") = std::vector<std::string>(),
          nb::arg("crops") = std::vector<std::pair<std::vector<uint64_t>, std::vector<uint64_t>>>(),
          "`crops`: per array, empty or the (start, stop) index range kept per field axis (stop <= start\n"
          "wraps across the axis's end): only those tiles are read and resident.")
      .def(
          "start_pass",
          [](EngineHandle& h, const engine::PassSpec& given) {
            engine::PassSpec spec = given;
            for (const engine::Label& label : spec.labels) {
              if (label.source >= h.engine->sources().size()) {
                ThrowIfError(InvalidArgument("label '" + label.name + "' names no array"));
              }
            }
            nb::gil_scoped_release release;
            return new PassHandle{ValueOrThrow(h.engine->StartPass(std::move(spec)))};
          },
          nb::arg("spec"), nb::rv_policy::take_ownership)
      .def_prop_ro("budget_bytes", [](const EngineHandle& h) { return h.engine->pool().budget_bytes(); })
      .def(
          "cache_counters",
          [](const EngineHandle& h) {
            nb::dict d;
            auto* disk = dynamic_cast<engine::DiskBacking*>(h.engine->pool().backing().get());
            d["backing"] = h.engine->pool().backing()->Describe();
            if (disk != nullptr) {
              const auto c = disk->counters();
              d["revived"] = c.revived;
              d["revive_missing"] = c.revive_missing;
              d["revive_mismatch"] = c.revive_mismatch;
              d["revive_corrupt"] = c.revive_corrupt;
              d["revive_source_changed"] = c.revive_source_changed;
              d["revive_unverified"] = c.revive_unverified;
              d["revalidated"] = c.revalidated;
              d["files_written"] = c.files_written;
              d["bytes_written"] = c.bytes_written;
              d["logged_entries"] = disk->logged_entries();
              d["logged_bytes"] = disk->logged_bytes();
              nb::list checked;
              for (const engine::RevalidationReport& r : disk->revalidation()) {
                nb::dict a;
                a["path"] = r.path;
                a["mode"] = std::string(engine::RevalidateName(r.mode));
                a["fallback"] = r.fallback;
                a["entries"] = r.entries;
                a["changed"] = r.changed;
                a["unverified"] = r.unverified;
                a["unversioned"] = r.unversioned;
                a["checked"] = r.checked;
                a["seconds"] = r.seconds;
                checked.append(a);
              }
              d["revalidation"] = checked;
            }
            return d;
          },
          "The disk tier's counters (revivals, files written, what the log holds) and, per array with\n"
          "logged entries, how they were checked against their source at open (revalidation).")
      .def_prop_ro(
          "budget_grown", [](const EngineHandle& h) { return h.engine->budget_grown(); },
          "The budget the last start_pass grew the automatic budget to (0: unchanged).")
      .def("pool_state",
           [](const EngineHandle& h) {
             nb::dict d;
             auto c = h.engine->pool().counters();
             d["resident_bytes"] = c.resident_bytes;
             d["resident_slots"] = c.resident_slots;
             d["evictions"] = c.evictions;
             d["pinned_slots"] = h.engine->pool().CountPinned();
             d["filling_slots"] = h.engine->pool().CountSlots(engine::SlotState::kFilling);
             d["live_passes"] = h.engine->live_passes();
             const auto buffers = h.engine->buffers().stats();
             d["batch_buffer_allocations"] = buffers.allocations;
             d["batch_locked_bytes"] = buffers.locked_bytes;
             d["batch_unlocked_takes"] = buffers.unlocked_takes;
             return d;
           })
      .def(
          "lock_batch_pages",
          [](EngineHandle& h, uintptr_t register_fn, uintptr_t unregister_fn, uint64_t budget_bytes) {
            if (register_fn == 0 || unregister_fn == 0) {
              ThrowIfError(InvalidArgument("lock_batch_pages: both function addresses are required"));
            }
            h.engine->buffers().LockPages(
                std::make_shared<FunctionRegistrar>(reinterpret_cast<FunctionRegistrar::RegisterFn>(register_fn),
                                                    reinterpret_cast<FunctionRegistrar::UnregisterFn>(unregister_fn)),
                budget_bytes);
          },
          nb::arg("register_fn"), nb::arg("unregister_fn"), nb::arg("budget_bytes"),
          "From now on batch buffers are page-locked through the two C functions (addresses of\n"
          "cudaHostRegister / cudaHostUnregister) while the locked bytes stay within the budget.\n"
          "The first functions stay for the engine's life; later calls change only the budget.")
      .def(
          "batch_pages_locked",
          [](const EngineHandle& h, uintptr_t address) {
            return h.engine->buffers().IsLocked(reinterpret_cast<const std::byte*>(address));
          },
          nb::arg("address"), "Whether the batch buffer starting at `address` is page-locked.")
      .def(
          "clear_cache", [](EngineHandle& h) { return h.engine->pool().EvictUnpinned(); },
          "Drops every resident chunk no pass holds; returns how many.")
      .def_prop_ro("decode_threads", [](const EngineHandle& h) { return h.engine->config().decode_threads; })
      .def_prop_ro(
          "gather_threads", [](const EngineHandle& h) { return h.engine->gather_threads(); },
          "Threads that gather each batch (the producer and its helpers), resolved.");
}

}  // namespace insitubatch::python
