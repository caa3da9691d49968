// planfetch's native core: packed key lists, CSV indexes, the object cache and the plan
// window prefetcher (cpp/src/insitubatch/prefetch). Every wait releases the GIL and lets
// signal handlers run.

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <unordered_set>

#include "bindings.h"
#include "insitubatch/cache/files.h"
#include "insitubatch/prefetch/csv_index.h"
#include "insitubatch/prefetch/object_cache.h"
#include "insitubatch/prefetch/prefetcher.h"

namespace insitubatch::python {
namespace {

using prefetch::KeyList;
using prefetch::ObjectCache;
using prefetch::Prefetcher;

size_t Index(const KeyList& list, int64_t i) {
  const auto n = static_cast<int64_t>(list.size());
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw nb::index_error("S3KeyList index out of range");
  return static_cast<size_t>(i);
}

prefetch::PruneMode Mode(const std::string& mode) {
  if (mode == "window") return prefetch::PruneMode::kWindow;
  if (mode == "pressure") return prefetch::PruneMode::kPressure;
  ThrowIfError(InvalidArgument("prune_mode must be \"window\" or \"pressure\", got \"" + mode + "\""));
  return {};
}

prefetch::PruneBackend Backend(const std::string& backend) {
  if (backend == "meta") return prefetch::PruneBackend::kMeta;
  if (backend == "scan") return prefetch::PruneBackend::kScan;
  ThrowIfError(InvalidArgument("prune_backend must be \"meta\" or \"scan\", got \"" + backend + "\""));
  return {};
}

nb::object Labels(prefetch::CsvIndex& index) {
  if (!index.has_labels) return nb::none();
  if (index.int_labels) {
    auto buffer = ValueOrThrow(Buffer::Allocate(index.labels.size() * sizeof(int64_t)));
    if (!index.labels.empty()) std::memcpy(buffer.data(), index.labels.data(), buffer.size());
    return BufferToNumpy(std::move(buffer), {index.labels.size()}, zarr::DataType{zarr::DataTypeId::kInt64});
  }
  nb::list out;
  for (std::string& s : index.text_labels) out.append(nb::str(s.data(), s.size()));
  return out;
}

}  // namespace

void BindPrefetch(nb::module_& m) {
  nb::class_<KeyList>(m, "KeyList", "URIs sharing a prefix, packed (front-coded) in native memory.")
      .def(nb::init<std::string>(), nb::arg("prefix") = "")
      .def("append", [](KeyList& l, std::string_view uri) { ThrowIfError(l.Append(uri, l.size())); })
      .def("extend",
           [](KeyList& l, nb::iterable uris) {
             size_t row = l.size();
             for (nb::handle u : uris) ThrowIfError(l.Append(nb::cast<std::string_view>(u), row++));
           })
      .def("__len__", &KeyList::size)
      .def("__getitem__", [](const KeyList& l, int64_t i) { return l.Get(Index(l, i)); })
      .def("suffix", [](const KeyList& l, int64_t i) { return l.Suffix(Index(l, i)); })
      .def_prop_ro("prefix", &KeyList::prefix)
      .def_prop_ro("memory_bytes", &KeyList::memory_bytes)
      .def("serialize",
           [](const KeyList& l) {
             const std::string bytes = l.Serialize();
             return nb::bytes(bytes.data(), bytes.size());
           })
      .def_static("deserialize",
                  [](nb::bytes b) { return ValueOrThrow(KeyList::Deserialize(std::string_view(b.c_str(), b.size()))); })
      .def("__eq__", [](const KeyList& a, const KeyList& b) { return a == b; });

  m.def(
      "read_csv_index",
      [](const std::string& path, const std::string& uri_column, const std::string& label_column, bool pack,
         std::optional<std::string> prefix) {
        prefetch::CsvIndexOptions options{uri_column, label_column, pack, std::move(prefix), path};
        Result<prefetch::CsvIndex> index = [&]() -> Result<prefetch::CsvIndex> {
          GilRelease release;
          INSITU_ASSIGN_OR_RETURN(std::string text, cache::ReadSmallFile(path, uint64_t{64} << 30));
          return prefetch::ParseCsvIndex(text, options);
        }();
        prefetch::CsvIndex out = ValueOrThrow(std::move(index));
        nb::object uris;
        if (pack) {
          uris = nb::cast(std::make_shared<KeyList>(std::move(out.packed)));
        } else {
          nb::list list;
          for (std::string& u : out.uris) list.append(nb::str(u.data(), u.size()));
          uris = list;
        }
        return nb::make_tuple(uris, Labels(out));
      },
      nb::arg("path"), nb::arg("uri_column"), nb::arg("label_column"), nb::arg("pack"), nb::arg("prefix") = nb::none(),
      "(URIs as a KeyList or list, labels as int64 array, list of str, or None).");
  m.def("bucket_prefix", [](std::string_view uri) { return ValueOrThrow(prefetch::BucketPrefix(uri)); });

  nb::class_<ObjectCache>(m, "ObjectCache", "Objects downloaded to local files (planfetch).")
      .def_static(
          "open",
          [](const std::string& dir, uint64_t max_bytes, size_t download_threads, double min_age, double lock_wait,
             int parent_pid) {
            return ValueOrThrow(ObjectCache::Open({dir, max_bytes, download_threads, min_age, lock_wait, parent_pid}));
          },
          nb::arg("dir"), nb::arg("max_bytes"), nb::arg("download_threads"), nb::arg("min_age_seconds"),
          nb::arg("lock_wait_seconds") = 600.0, nb::arg("parent_pid") = 0)
      .def("register_store", &ObjectCache::RegisterStore, nb::arg("prefix"), nb::arg("store"))
      .def("has_store_for", &ObjectCache::HasStoreFor, nb::arg("uri"))
      .def("local_path", [](const ObjectCache& c, std::string_view uri) { return ValueOrThrow(c.LocalPath(uri)); })
      .def(
          "ensure_local",
          [](ObjectCache& c, std::string_view uri) {
            bool interrupted = false;
            Result<std::string> path = [&] {
              GilRelease release;
              return c.EnsureLocal(uri, [&interrupted]() -> Status {
                if (!SignalRaised()) return Status::Ok();
                interrupted = true;
                return Cancelled("interrupted");
              });
            }();
            if (interrupted) throw nb::python_error();
            return ValueOrThrow(std::move(path));
          },
          nb::arg("uri"))
      .def(
          "prefetch",
          [](ObjectCache& c, const std::vector<std::string>& uris) {
            GilRelease release;
            c.Prefetch(uris);
          },
          nb::arg("uris"))
      .def(
          "prune",
          [](ObjectCache& c, const std::string& mode, const std::string& backend,
             const std::vector<std::string>& keep) {
            const std::unordered_set<std::string> keep_set(keep.begin(), keep.end());
            Result<prefetch::PruneResult> r = [&] {
              GilRelease release;
              return c.Prune(Mode(mode), Backend(backend), keep_set);
            }();
            const auto out = ValueOrThrow(std::move(r));
            nb::dict d;
            d["removed_files"] = out.removed_files;
            d["removed_bytes"] = out.removed_bytes;
            d["kept_files"] = out.kept_files;
            d["kept_bytes"] = out.kept_bytes;
            return d;
          },
          nb::arg("mode"), nb::arg("backend"), nb::arg("keep") = std::vector<std::string>())
      .def(
          "close",
          [](ObjectCache& c) {
            GilRelease release;
            c.Close();
          },
          "Cancels queued and in-flight downloads and waits for them; later ones fail.")
      .def("stats", [](const ObjectCache& c) {
        const auto s = c.stats();
        nb::dict d;
        d["downloads"] = s.downloads;
        d["bytes_downloaded"] = s.bytes_downloaded;
        d["hits"] = s.hits;
        d["waited_elsewhere"] = s.waited_elsewhere;
        d["failures"] = s.failures;
        d["retries"] = s.retries;
        d["rejected"] = s.rejected;
        d["files"] = s.files;
        d["bytes"] = s.bytes;
        d["in_flight"] = s.in_flight;
        d["queued"] = s.queued;
        return d;
      });

  nb::class_<Prefetcher>(m, "Prefetcher", "A plan's sliding window of downloads (planfetch).")
      .def_static(
          "create",
          [](std::shared_ptr<ObjectCache> cache, std::shared_ptr<KeyList> uris, size_t ahead, size_t back,
             size_t prune_every, const std::string& mode, const std::string& backend, nb::handle trace) {
            const prefetch::PrefetchOptions options{ahead,
                                                    back,
                                                    prune_every,
                                                    Mode(mode),
                                                    Backend(backend),
                                                    TraceEvents(trace, TraceRecorder::kDefaultCapacity)};
            return ValueOrThrow(Prefetcher::Create(std::move(cache), std::move(uris), options));
          },
          nb::arg("cache"), nb::arg("uris"), nb::arg("batches_ahead"), nb::arg("batches_back"), nb::arg("prune_every"),
          nb::arg("prune_mode"), nb::arg("prune_backend"), nb::arg("trace") = false,
          "`trace`: record the run's downloads, waits and prunes (True: the default ring of events).")
      .def(
          "trace",
          [](const Prefetcher& p) -> nb::object {
            if (!p.trace()) return nb::none();
            return TraceToPython(*p.trace(), prefetch::kPrefetchEventNames, {});
          },
          "What a recorded prefetcher recorded so far (TraceToPython in bindings.h), or None.")
      .def(
          "set_plan",
          [](Prefetcher& p, nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> plan,
             std::optional<nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>> keep) {
            std::vector<int64_t> flat(plan.data(), plan.data() + plan.size());
            std::vector<int64_t> kept;
            size_t keep_width = 0;
            if (keep) {
              kept.assign(keep->data(), keep->data() + keep->size());
              keep_width = keep->shape(1);
            }
            ThrowIfError(p.SetPlan(std::move(flat), plan.shape(1), std::move(kept), keep_width));
          },
          nb::arg("plan"), nb::arg("keep") = nb::none(),
          "`keep`: the batches whose files a prune keeps, when other ranks share the directory.")
      .def(
          "prime",
          [](Prefetcher& p, size_t start) {
            GilRelease release;
            p.Prime(start);
          },
          nb::arg("start") = 0)
      .def(
          "on_batch_yielded",
          [](Prefetcher& p, size_t i) {
            Status s;
            {
              GilRelease release;
              s = p.OnBatchYielded(i);
            }
            ThrowIfError(s);
          },
          nb::arg("batch_idx"))
      .def("stats", [](const Prefetcher& p) {
        const auto s = p.stats();
        nb::dict d;
        d["requested"] = s.requested;
        d["prunes"] = s.prunes;
        d["pruned_files"] = s.pruned_files;
        d["pruned_bytes"] = s.pruned_bytes;
        d["position"] = s.position;
        d["scheduled_to"] = s.scheduled_to;
        return d;
      });
}

}  // namespace insitubatch::python
