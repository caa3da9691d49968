// Sizing bindings: the engine's memory model (engine/sizing.h) for describe() and
// print_summary(), from geometry alone, so the report prints what the engine enforces.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
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
  m.def(
      "slot_layout",
      [](std::vector<uint64_t> shape, std::vector<uint64_t> chunks, int sample_axis, const std::string& dtype,
         std::optional<std::vector<uint64_t>> out_field, std::optional<std::string> out_dtype) {
        engine::ArrayShape array{std::move(shape), std::move(chunks), sample_axis, NumpyDtype(dtype)};
        engine::SlotLayout stored = ValueOrThrow(engine::StoredLayout(array));
        engine::SlotLayout resident = stored;
        if (out_field) {
          const int64_t spc = static_cast<int64_t>(array.chunks[sample_axis]);
          resident = engine::TransformedLayout(spc, *out_field, NumpyDtype(out_dtype.value_or(dtype)));
        }
        nb::dict d;
        d["tile_bytes"] = stored.tile_bytes;
        d["tiles"] = stored.tiles;
        d["stored_bytes"] = stored.bytes();
        d["slot_bytes"] = engine::SlotCharge(stored, resident);
        d["gather_run_bytes"] = engine::GatherRunBytes(resident);
        return d;
      },
      nb::arg("shape"), nb::arg("chunks"), nb::arg("sample_axis"), nb::arg("dtype"), nb::arg("out_field") = nb::none(),
      nb::arg("out_dtype") = nb::none(),
      "One array's slot as the pool holds it: stored tile bytes and count, the slot charge\n"
      "and the gather run; `out_field` / `out_dtype`: after a chunk transform.");
  m.def(
      "working_set_floor",
      [](const std::vector<std::tuple<std::string, uint64_t, int64_t, int64_t>>& labels, int64_t block_chunks,
         int64_t ref_spc, bool shuffle, int64_t n_train_chunks, bool reread_spill) {
        std::vector<engine::FloorLabel> in;
        for (const auto& [path, slot_bytes, spc, offset] : labels) {
          if (spc < 1) ThrowIfError(InvalidArgument("a label's samples per chunk must be >= 1"));
          in.push_back({path, slot_bytes, spc, offset});
        }
        return engine::WorkingSetFloor(in, {block_chunks, ref_spc, shuffle, n_train_chunks, reread_spill});
      },
      nb::arg("labels"), nb::arg("block_chunks"), nb::arg("ref_spc"), nb::arg("shuffle"), nb::arg("n_train_chunks"),
      nb::arg("reread_spill") = false, "The residency floor for labels (path, slot_bytes, samples per chunk, offset).");
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
  m.def(
      "pass_rows",
      [](const std::vector<int64_t>& chunk_ids, int64_t spc, int64_t n_samples, int64_t lo, int64_t hi) {
        return engine::PassRows(chunk_ids, spc, n_samples, {lo, hi});
      },
      nb::arg("chunk_ids"), nb::arg("spc"), nb::arg("n_samples"), nb::arg("lo"), nb::arg("hi"),
      "Rows one pass over these chunks yields (their samples inside [lo, hi)).");
}

}  // namespace insitubatch::python
