// Zarr bindings: the hierarchy (metadata only) and single-chunk reads.

#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

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
      .def("array_paths", [](const Hierarchy& h) { return ValueOrThrow(h.ArrayPaths()); })
      // Without the GIL: a store that cannot list reads a node's documents when first asked.
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

  m.def(
      "open_hierarchy",
      [](std::shared_ptr<Store> store) {
        nb::gil_scoped_release release;
        return ValueOrThrow(Hierarchy::Open(std::move(store)));
      },
      nb::arg("store"), "Reads the hierarchy's metadata (no chunk data).");
}

}  // namespace insitubatch::python
