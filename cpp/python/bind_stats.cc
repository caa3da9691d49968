// What a pass did (engine/stats.h), bound as read-only objects: runtime.PassStats copies
// them by attribute name, so a field one side lacks fails loudly instead of being skipped.

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "insitubatch/engine/stats.h"

namespace insitubatch::python {

void BindStats(nb::module_& m) {
  using namespace engine;
  nb::class_<StageTimes>(m, "StageTimes", "A pass's summed stage times (engine/stats.h).")
      .def_ro("fetch_wait_s", &StageTimes::fetch_wait_s)
      .def_ro("admission_parked_s", &StageTimes::admission_parked_s)
      .def_ro("decode_s", &StageTimes::decode_s)
      .def_ro("assemble_s", &StageTimes::assemble_s)
      .def_ro("gather_s", &StageTimes::gather_s)
      .def_ro("batch_transform_s", &StageTimes::batch_transform_s);
  nb::class_<Waited>(m, "Waited", "The consumer's waits, charged per stage.")
      .def_ro("store_s", &Waited::store_s)
      .def_ro("decode_s", &Waited::decode_s)
      .def_ro("residency_s", &Waited::residency_s)
      .def_ro("gather_s", &Waited::gather_s);
  nb::class_<Depths>(m, "Depths", "Queue depths and peaks of a pass.")
      .def_ro("batch_queue_capacity", &Depths::batch_queue_capacity)
      .def_ro("batch_queue_peak", &Depths::batch_queue_peak)
      .def_ro("batch_queue_samples", &Depths::batch_queue_samples)
      .def_ro("batch_queue_empty", &Depths::batch_queue_empty)
      .def_ro("batch_queue_full_enough", &Depths::batch_queue_full_enough)
      .def_ro("inflight_peak", &Depths::inflight_peak)
      .def_ro("max_inflight", &Depths::max_inflight)
      .def_ro("decode_queue_peak", &Depths::decode_queue_peak)
      .def_ro("decode_threads", &Depths::decode_threads)
      .def_ro("chunk_decoders_peak", &Depths::chunk_decoders_peak)
      .def_ro("gather_threads", &Depths::gather_threads)
      .def_ro("resident_peak", &Depths::resident_peak)
      .def_ro("resident_peak_bytes", &Depths::resident_peak_bytes)
      .def_prop_ro(
          "budget_bytes",
          [](const Depths& d) { return d.budget_bytes == 0 ? nb::none() : nb::object(nb::int_(d.budget_bytes)); },
          "The residency budget in bytes, None when unbounded.");
  nb::class_<RetryStats>(m, "RetryStats", "Transient store failures retried on the way to a pass's bytes.")
      .def_ro("retries", &RetryStats::retries)
      .def_ro("backoff_s", &RetryStats::backoff_s)
      .def_ro("last_error", &RetryStats::last_error)
      .def_ro("corrupt_rereads", &RetryStats::corrupt_rereads);
  nb::class_<BadChunk>(m, "BadChunk",
                       "A stored chunk served as fill: array, chunk index, inner coordinates, and why\n"
                       "its bytes did not decode.")
      .def_ro("array", &BadChunk::array)
      .def_ro("chunk_index", &BadChunk::chunk_index)
      .def_ro("inner_coord", &BadChunk::inner_coord)
      .def_ro("reason", &BadChunk::reason);
  nb::class_<PassStats>(m, "PassStats", "What one pass did (engine/stats.h).")
      .def_ro("split", &PassStats::split)
      .def_ro("epoch", &PassStats::epoch)
      .def_ro("batches", &PassStats::batches)
      .def_ro("samples", &PassStats::samples)
      .def_ro("cache_hits", &PassStats::cache_hits)
      .def_ro("cache_misses", &PassStats::cache_misses)
      .def_ro("rereads", &PassStats::rereads)
      .def_ro("revived", &PassStats::revived)
      .def_ro("revive_rejected", &PassStats::revive_rejected)
      .def_ro("source_changed", &PassStats::source_changed)
      .def_ro("evictions", &PassStats::evictions)
      .def_ro("tiles_read", &PassStats::tiles_read)
      .def_ro("bytes_read", &PassStats::bytes_read)
      .def_ro("bad_chunks", &PassStats::bad_chunks)
      .def_ro("retry", &PassStats::retry)
      .def_ro("finished", &PassStats::finished)
      .def_ro("wall_s", &PassStats::wall_s)
      .def_ro("times", &PassStats::times)
      .def_ro("waited", &PassStats::waited)
      .def_ro("depths", &PassStats::depths);
}

}  // namespace insitubatch::python
