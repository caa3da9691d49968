// Store bindings: the opaque Store handle every other entry point accepts, and the local
// constructors (file paths / file:// URLs, in-memory).

#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

#include "bindings.h"
#include "insitubatch/io/counting_store.h"
#include "insitubatch/io/file_store.h"
#include "insitubatch/io/memory_store.h"
#include "insitubatch/io/references/reference_store.h"

namespace insitubatch::python {
namespace {

// A blocking read Ctrl-C can interrupt: it waits in slices with the GIL released and runs
// the signal handlers between them; their exception cancels the read and is raised.
Result<ReadResult> ReadInterruptibly(Store& store, std::string key, ByteRange range) {
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    std::optional<Result<ReadResult>> result;
    CancelFlag cancel;
  };
  auto state = std::make_shared<State>();
  bool interrupted = false;
  Result<ReadResult> out = [&]() -> Result<ReadResult> {
    GilRelease release;
    store.ReadAsync(
        std::move(key), range,
        [state](Result<ReadResult> r) {
          std::lock_guard lock(state->mutex);
          state->result = std::move(r);
          state->cv.notify_all();
        },
        CancelRef(state, &state->cancel));
    std::unique_lock lock(state->mutex);
    while (!state->result) {
      if (state->cv.wait_for(lock, std::chrono::milliseconds(50)) == std::cv_status::timeout && !state->result) {
        lock.unlock();
        interrupted = SignalRaised();
        lock.lock();
        if (interrupted) {
          state->cancel.Cancel();
          return Cancelled("interrupted");
        }
      }
    }
    return std::move(*state->result);
  }();
  if (interrupted) throw nb::python_error();
  return out;
}

// `bytes` (viewing the caller's object, which outlives the call) written without the GIL.
bool WriteObject(Store& store, std::string key, std::string_view bytes, bool if_absent) {
  GilRelease release;
  return ValueOrThrow(
      store.Write(std::move(key), bytes, if_absent ? Store::WriteMode::kIfAbsent : Store::WriteMode::kOverwrite));
}

}  // namespace

void BindStores(nb::module_& m) {
  nb::class_<Store>(m, "Store", nb::dynamic_attr(), "A key -> bytes store (file, memory, HTTP, S3, ...).")
      .def(
          "read",
          [](Store& store, std::string key, std::optional<uint64_t> offset, std::optional<uint64_t> length,
             std::optional<uint64_t> suffix) -> nb::object {
            ByteRange range = ByteRange::All();
            if (suffix) {
              range = ByteRange::Suffix(*suffix);
            } else if (offset || length) {
              if (!offset || !length) {
                ThrowIfError(InvalidArgument("read: pass both offset and length"));
              }
              range = ByteRange::Range(*offset, *length);
            }
            ThrowIfError(ValidateKey(key));
            ReadResult r = ValueOrThrow(ReadInterruptibly(store, std::move(key), range));
            if (!r.found) return nb::none();
            return nb::bytes(reinterpret_cast<const char*>(r.data.data()), r.data.size());
          },
          nb::arg("key"), nb::arg("offset") = nb::none(), nb::arg("length") = nb::none(),
          nb::arg("suffix") = nb::none(),
          "Reads a key (whole, a byte range, or a suffix); None when the key is absent.")
      .def(
          "list",
          [](Store& store, const std::string& prefix) {
            nb::gil_scoped_release release;
            return ValueOrThrow(store.List(prefix));
          },
          nb::arg("prefix") = "", "Every key under `prefix`, sorted.")
      .def(
          "list_dir",
          [](Store& store, const std::string& dir) {
            DirListing listing;
            {
              nb::gil_scoped_release release;
              listing = ValueOrThrow(store.ListDir(dir));
            }
            return nb::make_tuple(listing.keys, listing.dirs);
          },
          nb::arg("dir") = "",
          "One level below `dir` ('' = the root, else 'a/b'): (the keys directly in it, its subdirectories), "
          "each sorted. UnsupportedError (a NotImplementedError) where the store lists only whole prefixes (use "
          "list()).")
      .def("describe", &Store::Describe, nb::arg("key") = "", "Where `key` lives, as a path or URL.")
      .def_prop_ro("remote", &Store::remote, "Whether its reads cross a network (HTTP, S3, GCS, Azure).")
      .def(
          "warm_connections",
          [](Store& store, const std::string& key, size_t connections) {
            Status status;
            {
              nb::gil_scoped_release release;
              status = store.WarmConnections(key, connections);
            }
            ThrowIfError(status);
          },
          nb::arg("key"), nb::arg("connections"),
          "Opens up to `connections` connections to a remote store's server in the background (one-byte "
          "reads of `key`, answers dropped); nothing on a local store. ValueError for a bad key or more than "
          "1024 connections.")
      .def_prop_ro("writable", &Store::writable, "Whether write/delete are served (opened with read_only=False).")
      .def(
          "write",
          [](Store& store, std::string key, nb::bytes value, bool if_absent) {
            return WriteObject(store, std::move(key), std::string_view(value.c_str(), value.size()), if_absent);
          },
          nb::arg("key"), nb::arg("value"), nb::arg("if_absent") = false,
          "Writes a whole object; with if_absent only when none is there (atomically). Returns whether it wrote.")
      .def(
          "write",
          [](Store& store, std::string key,
             nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> value,
             bool if_absent) {  // zarr's Buffer.as_numpy_array(): written without a copy to bytes
            return WriteObject(store, std::move(key),
                               std::string_view(reinterpret_cast<const char*>(value.data()), value.size()), if_absent);
          },
          nb::arg("key"), nb::arg("value"), nb::arg("if_absent") = false)
      .def(
          "delete",
          [](Store& store, std::string key) {
            GilRelease release;
            ThrowIfError(store.Delete(std::move(key)));
          },
          nb::arg("key"), "Removes an object (a missing key is fine).")
      .def(
          "delete_prefix",
          [](Store& store, std::string prefix) {
            GilRelease release;
            ThrowIfError(store.DeletePrefix(std::move(prefix)));
          },
          nb::arg("prefix"), "Removes every object under `prefix` + '/' ('' = all).")
      .def("__repr__", [](const Store& store) { return "<insitubatch.Store " + store.Describe("") + ">"; });

  nb::class_<FileStore, Store>(m, "FileStore", nb::dynamic_attr()).def_prop_ro("root", &FileStore::root);

  nb::class_<MemoryStore, Store>(m, "MemoryStore", nb::dynamic_attr())
      .def(
          "__init__", [](MemoryStore* self, bool writable) { new (self) MemoryStore(writable); },
          nb::arg("writable") = false)
      .def(
          "set",
          [](MemoryStore& store, std::string key, nb::bytes value) {
            ThrowIfError(ValidateKey(key));
            store.Set(std::move(key), std::string(value.c_str(), value.size()));
          },
          nb::arg("key"), nb::arg("value"))
      .def("erase", &MemoryStore::Erase, nb::arg("key"));

  nb::class_<CountingStore, Store>(m, "CountingStore", nb::dynamic_attr(),
                                   "Wraps a store and counts reads (and writes, and listings) per key.")
      .def(
          "__init__",
          [](CountingStore* self, std::shared_ptr<Store> inner) { new (self) CountingStore(std::move(inner)); },
          nb::arg("inner"))
      .def("reads", &CountingStore::reads, "Reads per key since the last reset.")
      .def("writes", &CountingStore::writes, "Writes per key since the last reset.")
      .def("lists", &CountingStore::lists,
           "Listings since the last reset, per prefix: list(p) as 'p*', list_dir(d) as 'd/' ('/' for the root).")
      .def_prop_ro("total_reads", &CountingStore::total_reads)
      .def("reset", &CountingStore::Reset);

  nb::class_<ReferenceSet>(m, "ReferenceSet",
                           "A virtual store's key -> reference map (kerchunk JSON, or built entry by entry).")
      .def("__init__", [](ReferenceSet* self) { new (self) ReferenceSet(); })
      .def_static(
          "parse_json",
          [](nb::bytes text, const std::string& where) {
            std::string_view view(text.c_str(), text.size());
            nb::gil_scoped_release release;
            return ValueOrThrow(ReferenceSet::ParseJson(view, where));
          },
          nb::arg("text"), nb::arg("where"), "Parses kerchunk JSON (version 0 or 1).")
      .def(
          "add_range",
          [](ReferenceSet& set, std::string key, std::string_view url, int64_t offset, int64_t length) {
            ThrowIfError(set.AddRange(std::move(key), url, offset, length));
          },
          nb::arg("key"), nb::arg("url"), nb::arg("offset"), nb::arg("length"))
      .def(
          "add_whole",
          [](ReferenceSet& set, std::string key, std::string_view url) {
            ThrowIfError(set.AddWhole(std::move(key), url));
          },
          nb::arg("key"), nb::arg("url"))
      .def(
          "add_inline",
          [](ReferenceSet& set, std::string key, nb::bytes data) {
            ThrowIfError(set.AddInline(std::move(key), std::string(data.c_str(), data.size())));
          },
          nb::arg("key"), nb::arg("data"))
      .def_prop_ro("targets", &ReferenceSet::targets, "Distinct target URLs, in first-use order.")
      .def("first_key_of", &ReferenceSet::first_key_of, nb::arg("target"),
           "A key whose reference points to target URL number `target`.")
      .def("__len__", &ReferenceSet::size);

  nb::class_<ReferenceStore, Store>(m, "ReferenceStore", nb::dynamic_attr(), "A read-only store over a ReferenceSet.")
      .def_prop_ro("name", &ReferenceStore::name)
      .def_prop_ro("reference_count", [](const ReferenceStore& s) { return s.references().size(); })
      .def_prop_ro("target_reads", &ReferenceStore::target_reads,
                   "Reads of target objects so far (a coalesced read of neighbouring chunks counts once).");
  m.def(
      "open_reference_store",
      [](ReferenceSet& refs, std::vector<std::pair<std::shared_ptr<Store>, std::string>> targets,
         std::string name) -> std::shared_ptr<Store> {
        std::vector<ReferenceTarget> resolved;
        resolved.reserve(targets.size());
        for (auto& [store, key] : targets) resolved.push_back({std::move(store), std::move(key)});
        // The set moves into the store: `refs` is left empty.
        return ValueOrThrow(
            ReferenceStore::Open(std::exchange(refs, ReferenceSet()), std::move(resolved), std::move(name)));
      },
      nb::arg("refs"), nb::arg("targets"), nb::arg("name"),
      "A store over `refs` (which it takes over, leaving it empty); targets[i] = (store, key) serves "
      "refs.targets[i].");

  m.def(
      "store_schemes",
      [] {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& [written, served] : StoreSchemes()) out.emplace_back(written, served);
        return out;
      },
      "URL schemes as written -> the scheme of the store that serves each (\"\" is a plain path).");

  m.def(
      "open_file_store",
      [](const std::string& root, bool writable) -> std::shared_ptr<Store> {
        return ValueOrThrow(FileStore::Open(root, 0, writable));
      },
      nb::arg("root"), nb::arg("writable") = false,
      "A store over a local directory (a path or a file:// URL); writable creates it when missing.");
}

}  // namespace insitubatch::python
