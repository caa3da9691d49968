// Zarr bindings: the hierarchy (metadata only) and single-chunk reads.

#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "bindings.h"
#include "insitubatch/zarr/hierarchy.h"

namespace insitubatch::python {
namespace {

nb::tuple ToTuple(const std::vector<uint64_t>& values) {
  nb::list out;
  for (uint64_t v : values) out.append(nb::int_(v));
  return nb::tuple(out);
}

// The sharding codec's inner chunk shape, or the stored chunk shape when unsharded.
std::vector<uint64_t> ReadChunkShape(const zarr::ArrayMetadata& meta) {
  for (const auto& codec : meta.codecs) {
    if (codec.name == "sharding_indexed" && codec.configuration.contains("chunk_shape") &&
        codec.configuration["chunk_shape"].is_array()) {
      std::vector<uint64_t> inner;
      for (const auto& v : codec.configuration["chunk_shape"]) {
        if (!v.is_number_unsigned()) return meta.chunk_shape;
        inner.push_back(v.get<uint64_t>());
      }
      return inner;
    }
  }
  return meta.chunk_shape;
}

nb::dict MetadataToDict(const zarr::ArrayMetadata& meta) {
  nb::dict d;
  d["zarr_format"] = meta.zarr_format;
  d["shape"] = ToTuple(meta.shape);
  d["chunks"] = ToTuple(meta.chunk_shape);
  d["read_chunks"] = ToTuple(ReadChunkShape(meta));
  d["dtype"] = meta.dtype.numpy_typestr();
  nb::list codecs;
  for (const auto& c : meta.codecs) codecs.append(nb::str(c.name.data(), c.name.size()));
  d["codecs"] = codecs;
  d["attributes_json"] = meta.attributes.dump();
  nb::list dims;
  for (const auto& name : meta.dimension_names)
    dims.append(nb::str(name.data(), name.size()));  // "\u0000" may be inside
  d["dimension_names"] = nb::tuple(dims);
  if (!meta.record_fields.is_null()) d["record_fields"] = meta.record_fields.dump();
  if (meta.dtype.is_variable()) {  // a string: its UTF-8 (or raw) bytes, any length
    d["string_kind"] = std::string(1, meta.dtype.text_kind);
    const auto& fill = meta.fill_value.record;
    d["fill_value"] = nb::bytes(reinterpret_cast<const char*>(fill.data()), fill.size());
  } else {
    d["fill_value"] = nb::bytes(reinterpret_cast<const char*>(meta.fill_value.data()), meta.dtype.itemsize());
  }
  return d;
}

using RowIndex = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// dst[dst_rows[k]] = src[src_rows[k]] for every k: one memcpy per row, without the GIL, and
// no gathered temporary (numpy's dst[i] = src[j] copies every row twice).
void CopyRows(nb::ndarray<nb::c_contig, nb::device::cpu> dst, const RowIndex& dst_rows,
              nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> src, const RowIndex& src_rows) {
  if (dst.ndim() == 0 || src.ndim() == 0 || dst.dtype() != src.dtype()) {
    ThrowIfError(InvalidArgument("copy_rows: dst and src must be arrays of one dtype with a leading row axis"));
  }
  const size_t dst_n = dst.shape(0);
  const size_t src_n = src.shape(0);
  const size_t row = dst_n == 0 ? 0 : dst.nbytes() / dst_n;
  if ((src_n == 0 ? 0 : src.nbytes() / src_n) != row && src_n != 0 && dst_n != 0) {
    ThrowIfError(InvalidArgument("copy_rows: rows of dst and src differ in size"));
  }
  if (dst_rows.shape(0) != src_rows.shape(0)) {
    ThrowIfError(InvalidArgument("copy_rows: dst_rows and src_rows differ in length"));
  }
  const int64_t* to = dst_rows.data();
  const int64_t* from = src_rows.data();
  const size_t n = dst_rows.shape(0);
  for (size_t k = 0; k < n; ++k) {
    if (to[k] < 0 || static_cast<uint64_t>(to[k]) >= dst_n || from[k] < 0 || static_cast<uint64_t>(from[k]) >= src_n) {
      ThrowIfError(InvalidArgument("copy_rows: row index out of range at position " + std::to_string(k)));
    }
  }
  auto* out = static_cast<std::byte*>(dst.data());
  const auto* in = static_cast<const std::byte*>(src.data());
  nb::gil_scoped_release release;  // the arrays (held by the caller) outlive the call
  for (size_t k = 0; k < n; ++k) std::memcpy(out + to[k] * row, in + from[k] * row, row);
}

}  // namespace

void BindZarr(nb::module_& m) {
  using zarr::Array;
  using zarr::Hierarchy;

  nb::class_<Array>(m, "ZarrArray", "One opened zarr array (metadata + codec chain).")
      .def_prop_ro("path", &Array::path)
      .def_prop_ro("metadata", [](const Array& a) { return MetadataToDict(a.metadata()); })
      .def_prop_ro("codec_chain", [](const Array& a) { return a.codecs().Describe(); })
      .def_prop_ro("chunk_bytes", &Array::chunk_bytes)
      .def("chunk_key", &Array::ChunkKey, nb::arg("coords"))
      .def(
          "read_chunk",
          [](const Array& array, const std::vector<uint64_t>& coords) {
            ThrowIfError(array.ValidateChunkCoords(coords));
            Buffer buffer;
            {
              nb::gil_scoped_release release;
              buffer = ValueOrThrow(Buffer::Allocate(array.chunk_bytes()));
              ThrowIfError(array.ReadChunk(coords, buffer.span()));
            }
            return BufferToNumpy(std::move(buffer), array.metadata().chunk_shape, array.metadata().dtype);
          },
          nb::arg("coords"), "The decoded stored chunk at `coords` (full chunk shape; fill value if absent).")
      .def(
          "write_chunk",
          [](const Array& array, const std::vector<uint64_t>& coords,
             nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> chunk) {
            const std::span<const std::byte> bytes(static_cast<const std::byte*>(chunk.data()), chunk.nbytes());
            nb::gil_scoped_release release;  // `chunk` (held by the caller) outlives the call
            ThrowIfError(array.WriteChunk(coords, bytes));
          },
          nb::arg("coords"), nb::arg("chunk"),
          "Encodes one whole chunk (C-contiguous, the full chunk shape and dtype) and writes it; the store "
          "must be writable.")
      .def(
          "read_string_chunk",
          [](const Array& array, const std::vector<uint64_t>& coords) {
            Result<std::vector<std::string>> items = [&] {
              nb::gil_scoped_release release;
              return array.ReadStringChunk(coords);
            }();
            std::vector<std::string> values = ValueOrThrow(std::move(items));
            nb::list out;
            const bool text = array.metadata().dtype.text_kind == 'U';
            for (const std::string& v : values) {
              if (text) {
                out.append(nb::str(v.data(), v.size()));  // validated UTF-8
              } else {
                out.append(nb::bytes(v.data(), v.size()));
              }
            }
            return out;
          },
          nb::arg("coords"),
          "A variable-length string chunk's items in C order (str, or bytes for "
          "variable_length_bytes); the fill value where the chunk is absent.");

  nb::class_<Hierarchy>(m, "Hierarchy", "The groups and arrays of a zarr store.")
      .def_prop_ro("zarr_format", &Hierarchy::zarr_format)
      .def_prop_ro("consolidated", &Hierarchy::consolidated)
      // Without the GIL: a hierarchy without consolidated metadata reads a node's documents
      // when first asked for it, and walks the store when first asked for every array.
      .def("array_paths",
           [](const Hierarchy& h) {
             nb::gil_scoped_release release;
             return ValueOrThrow(h.ArrayPaths());
           })
      .def("kind",
           [](const Hierarchy& h, const std::string& path) {
             nb::gil_scoped_release release;
             return ValueOrThrow(h.Kind(path)) == zarr::NodeKind::kArray ? "array" : "group";
           })
      .def("array_metadata",
           [](const Hierarchy& h, const std::string& path) {
             Result<zarr::ArrayMetadata> metadata = [&] {
               nb::gil_scoped_release release;
               return h.ArrayMetadataAt(path);
             }();
             return MetadataToDict(ValueOrThrow(std::move(metadata)));
           })
      .def("open_array", [](const Hierarchy& h, const std::string& path) {
        nb::gil_scoped_release release;
        return ValueOrThrow(h.OpenArray(path));
      });

  m.def("copy_rows", &CopyRows, nb::arg("dst"), nb::arg("dst_rows"), nb::arg("src"), nb::arg("src_rows"),
        "dst[dst_rows[k]] = src[src_rows[k]] for each k (C-contiguous arrays of one dtype; int64 row indices), "
        "one copy per row without the GIL.");

  m.def(
      "open_hierarchy",
      [](std::shared_ptr<Store> store) {
        nb::gil_scoped_release release;
        return ValueOrThrow(Hierarchy::Open(std::move(store)));
      },
      nb::arg("store"), "Reads the hierarchy's metadata (no chunk data).");
}

}  // namespace insitubatch::python
