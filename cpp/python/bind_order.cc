// Epoch-order bindings: the sequential and shuffled orders and the shuffle-quality score of
// insitubatch.shuffle as thin calls into engine/order.h. (The shuffled order is the original
// insitubatch's, drawn from numpy's own PCG64 through its bit generator's capsule.) Results
// are numpy arrays whose memory a C++ vector owns.

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "insitubatch/engine/order.h"
#include "insitubatch/engine/patches.h"

namespace insitubatch::python {
namespace {

using ChunkIds = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Rows = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

// A numpy int64 array of `shape` viewing `values`; the capsule owns the vector.
nb::object VectorToNumpy(std::vector<int64_t> values, std::initializer_list<size_t> shape) {
  // Reserving keeps the data pointer non-null, even for an empty array.
  if (values.capacity() == 0) values.reserve(1);
  auto* owned = new std::vector<int64_t>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
  nb::ndarray<nb::numpy, int64_t> array(owned->data(), shape.size(), shape.begin(), owner);
  return nb::cast(array, nb::rv_policy::reference);
}

std::span<const int64_t> AsSpan(const ChunkIds& ids) { return {ids.data(), ids.shape(0)}; }

// The draws of a numpy bit generator, from its `capsule` (numpy/random/bitgen.h's bitgen_t).
engine::UniformBits NumpyBits(const nb::capsule& capsule) {
  struct NumpyBitgen {
    void* state;
    uint64_t (*next_uint64)(void*);
    uint32_t (*next_uint32)(void*);
    double (*next_double)(void*);
    uint64_t (*next_raw)(void*);
  };
  if (!PyCapsule_IsValid(capsule.ptr(), "BitGenerator")) {
    ThrowIfError(InvalidArgument("epoch order: not a numpy BitGenerator capsule"));
  }
  const auto* g = static_cast<const NumpyBitgen*>(PyCapsule_GetPointer(capsule.ptr(), "BitGenerator"));
  return {g->state, g->next_uint64, g->next_uint32};
}

// (rows (N, 2) [chunk, within], block_start (n_blocks + 1,)).
std::pair<nb::object, nb::object> OrderToNumpy(engine::EpochOrder order) {
  const size_t n = order.rows();
  std::vector<int64_t> rows(2 * n);
  for (size_t r = 0; r < n; ++r) {
    rows[2 * r] = order.chunk[r];
    rows[2 * r + 1] = order.within[r];
  }
  const size_t blocks = order.block_start.size();
  return {VectorToNumpy(std::move(rows), {n, 2}), VectorToNumpy(std::move(order.block_start), {blocks})};
}

}  // namespace

engine::EpochOrder OrderFromArrays(const Int64Array& rows, const Int64Array& block_start) {
  if (rows.ndim() != 2 || rows.shape(1) != 2) {
    ThrowIfError(InvalidArgument("order rows must have shape (N, 2)"));
  }
  if (block_start.ndim() != 1 || block_start.shape(0) < 1) {
    ThrowIfError(InvalidArgument("block_start must be a non-empty 1-D array"));
  }
  engine::EpochOrder order;
  const size_t n = rows.shape(0);
  order.chunk.resize(n);
  order.within.resize(n);
  const int64_t* r = rows.data();
  for (size_t i = 0; i < n; ++i) {
    order.chunk[i] = r[2 * i];
    order.within[i] = r[2 * i + 1];
  }
  order.block_start.assign(block_start.data(), block_start.data() + block_start.shape(0));
  int64_t previous = 0;
  for (int64_t b : order.block_start) {
    if (b < previous || b > static_cast<int64_t>(n)) {
      ThrowIfError(InvalidArgument("block_start must be non-decreasing within [0, N]"));
    }
    previous = b;
  }
  if (order.block_start.front() != 0 || order.block_start.back() != static_cast<int64_t>(n)) {
    ThrowIfError(InvalidArgument("block_start must start at 0 and end at N"));
  }
  return order;
}

void BindOrder(nb::module_& m) {
  nb::class_<engine::PatchGrid>(m, "PatchGrid", "Patch samples: the lattice or random draw of windows per anchor.")
      .def(
          "__init__",
          [](engine::PatchGrid* self, const std::string& mode, std::vector<uint64_t> extent, std::vector<uint64_t> size,
             std::vector<uint64_t> stride, uint64_t per_sample, uint64_t seed, const std::string& edges) {
            engine::PatchGrid grid;
            grid.mode = ValueOrThrow(engine::ParsePatchMode(mode));
            grid.extent = std::move(extent);
            grid.size = std::move(size);
            grid.stride = std::move(stride);
            grid.per_sample = per_sample;
            grid.seed = seed;
            grid.edges = ValueOrThrow(engine::ParsePatchEdges(edges));
            ThrowIfError(grid.Validate());
            new (self) engine::PatchGrid(std::move(grid));
          },
          nb::arg("mode"), nb::arg("extent"), nb::arg("size"), nb::arg("stride"), nb::arg("per_sample"),
          nb::arg("seed"), nb::arg("edges") = "inside")
      .def(
          "lattice",
          [](const engine::PatchGrid& g, size_t axis) {
            if (g.mode != engine::PatchGrid::Mode::kGrid || axis >= g.axes()) {
              ThrowIfError(InvalidArgument("lattice: a grid's patch axis, got " + std::to_string(axis)));
            }
            const size_t n = g.Positions(axis);
            std::vector<int64_t> out(n);
            for (size_t k = 0; k < n; ++k) out[k] = static_cast<int64_t>(g.LatticeOrigin(axis, k));
            return VectorToNumpy(std::move(out), {n});
          },
          nb::arg("axis"), "The grid's origins along patch axis `axis`, in order (int64).")
      .def_prop_ro("mode", [](const engine::PatchGrid& g) { return std::string(engine::PatchModeName(g.mode)); })
      .def_prop_ro("edges", [](const engine::PatchGrid& g) { return std::string(engine::PatchEdgesName(g.edges)); })
      .def_prop_ro("per_sample", &engine::PatchGrid::PerSample, "Patches per anchor.")
      .def(
          "origins",
          [](const engine::PatchGrid& g, const ChunkIds& anchors, const ChunkIds& patches, int64_t epoch) {
            if (anchors.shape(0) != patches.shape(0)) ThrowIfError(InvalidArgument("one patch per anchor"));
            const size_t n = anchors.shape(0);
            const size_t k = g.axes();
            std::vector<int64_t> out(n * k);
            for (size_t i = 0; i < n; ++i) {
              if (patches.data()[i] < 0 || static_cast<uint64_t>(patches.data()[i]) >= g.PerSample()) {
                ThrowIfError(InvalidArgument("patch " + std::to_string(patches.data()[i]) + " is outside [0, " +
                                             std::to_string(g.PerSample()) + ")"));
              }
              g.Origin(anchors.data()[i], static_cast<uint64_t>(patches.data()[i]), epoch,
                       std::span(out).subspan(i * k, k));
            }
            return VectorToNumpy(std::move(out), {n, k});
          },
          nb::arg("anchors"), nb::arg("patches"), nb::arg("epoch"),
          "Each (anchor, patch)'s origin in `epoch`: (N, axes) int64 (what batches carry as origins).");

  m.def(
      "check_order_args",
      [](const ChunkIds& chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks) {
        ThrowIfError(engine::CheckOrderArgs(AsSpan(chunk_ids), spc, n_samples, block_chunks));
      },
      nb::arg("chunk_ids"), nb::arg("spc"), nb::arg("n_samples"), nb::arg("block_chunks"),
      "Raises InvalidArgumentError unless the arguments describe a valid epoch order.");

  m.def(
      "shuffled_order",
      [](const ChunkIds& chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks, nb::capsule chunk_bits,
         nb::capsule row_bits) {
        ThrowIfError(engine::CheckOrderArgs(AsSpan(chunk_ids), spc, n_samples, block_chunks));
        const engine::UniformBits chunks = NumpyBits(chunk_bits), rows = NumpyBits(row_bits);
        Result<engine::EpochOrder> order = [&] {
          nb::gil_scoped_release release;  // the caller holds both generators' locks
          return engine::ShuffledOrder(AsSpan(chunk_ids), spc, n_samples, block_chunks, chunks, rows);
        }();
        return OrderToNumpy(ValueOrThrow(std::move(order)));
      },
      nb::arg("chunk_ids"), nb::arg("spc"), nb::arg("n_samples"), nb::arg("block_chunks"), nb::arg("chunk_bits"),
      nb::arg("row_bits"),
      "The shuffled order, draw for draw numpy's (engine/order.h): the chunks permuted by the\n"
      "bit generator `chunk_bits`, each block's rows by `row_bits` (numpy BitGenerator capsules;\n"
      "hold their locks): (rows (N, 2), block_start).");

  m.def(
      "sequential_order",
      [](const ChunkIds& chunk_ids, int64_t spc, int64_t n_samples, int64_t block_chunks) {
        ThrowIfError(engine::CheckOrderArgs(AsSpan(chunk_ids), spc, n_samples, block_chunks));
        engine::EpochOrder order;
        {
          nb::gil_scoped_release release;
          order = engine::SequentialOrder(AsSpan(chunk_ids), spc, n_samples, block_chunks);
        }
        return OrderToNumpy(std::move(order));
      },
      nb::arg("chunk_ids"), nb::arg("spc"), nb::arg("n_samples"), nb::arg("block_chunks"),
      "Chunks in the given order, `within` ascending: (rows (N, 2), block_start).");

  m.def(
      "keep_anchors",
      [](const Int64Array& rows, const Int64Array& block_start, int64_t spc, int64_t lo, int64_t hi) {
        engine::EpochOrder order = OrderFromArrays(rows, block_start);
        {
          nb::gil_scoped_release release;
          engine::KeepAnchorsIn(order, spc, lo, hi);
        }
        return OrderToNumpy(std::move(order));
      },
      nb::arg("rows"), nb::arg("block_start"), nb::arg("spc"), nb::arg("lo"), nb::arg("hi"),
      "The order without rows whose anchor lies outside [lo, hi) (a window's edges), block\n"
      "bounds kept consistent: the filter the engine's plan applies (engine/order.h).");

  m.def(
      "shuffle_quality",
      [](const Rows& rows, int64_t spc) {
        if (rows.shape(1) != 2) {
          throw StatusException{InvalidArgument("shuffle_quality: rows must have shape (N, 2), got (" +
                                                std::to_string(rows.shape(0)) + ", " + std::to_string(rows.shape(1)) +
                                                ")")};
        }
        std::span<const int64_t> pairs(rows.data(), 2 * rows.shape(0));
        nb::gil_scoped_release release;
        return engine::ShuffleQuality(pairs, spc);
      },
      nb::arg("rows"), nb::arg("spc"),
      "mean(|diff(rank)|) / (n / 3) clipped to 1, rank = chunk * spc + within;\n"
      "0 when fewer than 2 rows.");
}

}  // namespace insitubatch::python
