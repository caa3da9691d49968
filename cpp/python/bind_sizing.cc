// Sizing bindings: the engine's memory model (engine/sizing.h) for describe(),
// print_summary() and the construction check, from geometry alone, as one call
// (memory_model), so the report prints what the engine enforces.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "insitubatch/engine/sizing.h"

namespace insitubatch::python {
namespace {

zarr::DataType NumpyDtype(const std::string& typestr) {
  if (typestr == "bfloat16") return zarr::DataType{zarr::DataTypeId::kBFloat16};  // ml_dtypes' (no typestring)
  return ValueOrThrow(zarr::ParseV2TypeString(typestr)).dtype;
}

}  // namespace

void BindSizing(nb::module_& m) {
  m.def(
      "machine_memory_bytes", [] { return engine::MachineMemoryBytes(); },
      "The memory this process may use: physical RAM, or the cgroup's limit where lower.");
  m.attr("ALLOCATOR_RETENTION") = engine::kAllocatorRetention;
  m.def(
      "pin_budget_bytes", [] { return engine::PinBudgetBytes(engine::MachineMemoryBytes()); },
      "The framework adapters' default page-lock budget: an eighth of machine_memory_bytes().");

  nb::class_<engine::SizedLabel>(m, "SizedLabel",
                                 "One label the memory model sizes (an input of memory_model): its array as\n"
                                 "stored, its window offset, what gather writes per sample (`out_field` x\n"
                                 "`out_dtype`; the stored field when None) and whether a chunk transform\n"
                                 "assembles its slot.")
      .def(
          "__init__",
          [](engine::SizedLabel* self, std::string path, std::vector<uint64_t> shape, std::vector<uint64_t> chunks,
             int sample_axis, const std::string& dtype, int64_t offset, std::optional<std::vector<uint64_t>> out_field,
             std::optional<std::string> out_dtype, bool transformed, std::vector<uint64_t> row_field,
             std::vector<uint64_t> crop_start, std::vector<uint64_t> crop_stop) {
            engine::ArrayShape array{std::move(shape), std::move(chunks), sample_axis, NumpyDtype(dtype)};
            // The stored field (the shape less its sample axis) unless a transform's is given.
            std::vector<uint64_t> field;
            if (out_field) {
              field = std::move(*out_field);
            } else {
              for (size_t axis = 0; axis < array.shape.size(); ++axis) {
                if (static_cast<int>(axis) != sample_axis) field.push_back(array.shape[axis]);
              }
            }
            const zarr::DataType field_dtype = out_dtype ? NumpyDtype(*out_dtype) : array.dtype;
            new (self) engine::SizedLabel{std::move(path),
                                          std::move(array),
                                          offset,
                                          std::move(field),
                                          field_dtype,
                                          transformed,
                                          std::move(row_field),
                                          {std::move(crop_start), std::move(crop_stop)}};
          },
          nb::arg("path"), nb::arg("shape"), nb::arg("chunks"), nb::arg("sample_axis"), nb::arg("dtype"),
          nb::arg("offset") = 0, nb::arg("out_field") = nb::none(), nb::arg("out_dtype") = nb::none(),
          nb::arg("transformed") = false, nb::arg("row_field") = std::vector<uint64_t>(),
          nb::arg("crop_start") = std::vector<uint64_t>(), nb::arg("crop_stop") = std::vector<uint64_t>());

  nb::class_<engine::LabelTerms>(m, "LabelTerms", "One label's figures in memory_model's result.")
      .def_ro("stored_chunk_bytes", &engine::LabelTerms::stored_chunk_bytes)
      .def_ro("stored_chunks", &engine::LabelTerms::stored_chunks)
      .def_ro("slot_bytes", &engine::LabelTerms::slot_bytes)
      .def_ro("logical_chunk_bytes", &engine::LabelTerms::logical_chunk_bytes)
      .def_ro("gather_run_bytes", &engine::LabelTerms::gather_run_bytes)
      .def_ro("output_sample_bytes", &engine::LabelTerms::output_sample_bytes);

  nb::class_<engine::MemoryTerms>(m, "MemoryTerms",
                                  "Every figure of the memory model, by name (engine/sizing.h): what\n"
                                  "describe() prints and the construction check tests.")
      .def_ro("labels", &engine::MemoryTerms::labels)
      .def_ro("ref_spc", &engine::MemoryTerms::ref_spc)
      .def_ro("working_set_bytes", &engine::MemoryTerms::working_set_bytes)
      .def_ro("budget_bytes", &engine::MemoryTerms::budget_bytes)
      .def_ro("budget_is_automatic", &engine::MemoryTerms::budget_is_automatic)
      .def_ro("residency_bytes", &engine::MemoryTerms::residency_bytes)
      .def_ro("inflight_bytes", &engine::MemoryTerms::inflight_bytes)
      .def_ro("queued_batches", &engine::MemoryTerms::queued_batches)
      .def_ro("queue_bytes", &engine::MemoryTerms::queue_bytes)
      .def_ro("scratch_bytes", &engine::MemoryTerms::scratch_bytes)
      .def_ro("accounted_bytes", &engine::MemoryTerms::accounted_bytes)
      .def_ro("estimated_peak_bytes", &engine::MemoryTerms::estimated_peak_bytes)
      .def_ro("disk_bytes", &engine::MemoryTerms::disk_bytes)
      .def_ro("floor_ram_bytes", &engine::MemoryTerms::floor_ram_bytes)
      .def_ro("machine_bytes", &engine::MemoryTerms::machine_bytes);

  m.def(
      "memory_model",
      [](const std::vector<engine::SizedLabel>& labels, int64_t batch_size, int64_t block_chunks, int64_t ref_spc,
         int64_t max_inflight, int64_t prefetch_depth, bool shuffle, bool reread_spill, bool batch_transforms,
         int64_t n_train_chunks, uint64_t split_chunks, std::optional<uint64_t> budget, int64_t iterations,
         bool cache_dir) {
        const engine::MemoryConfig config{batch_size, block_chunks, ref_spc,          max_inflight,   prefetch_depth,
                                          shuffle,    reread_spill, batch_transforms, n_train_chunks, split_chunks,
                                          budget,     iterations,   cache_dir};
        return ValueOrThrow(engine::SizeMemory(labels, config));
      },
      nb::arg("labels"), nb::kw_only(), nb::arg("batch_size"), nb::arg("block_chunks"), nb::arg("ref_spc"),
      nb::arg("max_inflight"), nb::arg("prefetch_depth"), nb::arg("shuffle"), nb::arg("reread_spill"),
      nb::arg("batch_transforms"), nb::arg("n_train_chunks"), nb::arg("split_chunks"), nb::arg("budget").none(),
      nb::arg("iterations"), nb::arg("cache_dir"),
      "The whole memory model from geometry and configuration alone (engine/sizing's SizeMemory):\n"
      "per-label slot, gather and chunk figures, the working-set floor, the budget, residency,\n"
      "reads in flight, batch queue, scratch, accounted and estimated peak, cache_dir disk and the\n"
      "machine's memory. `ref_spc` 0: the labels' smallest sample chunk; `budget` None: the floor.");
  m.def("resolve_block_chunks", &engine::ResolveBlockChunks, nb::arg("requested"), nb::arg("batch_size"),
        nb::arg("ref_spc"), nb::arg("n_chunks"),
        "block_chunks widened so one batch fits in one block (never narrowed), at least 1.");
  m.def(
      "valid_anchor_range",
      [](const std::vector<int64_t>& offsets, int64_t n_samples) {
        const engine::AnchorRange r = engine::ValidAnchorRange(offsets, n_samples);
        return std::make_pair(r.lo, r.hi);
      },
      nb::arg("offsets"), nb::arg("n_samples"));
}

}  // namespace insitubatch::python
