#pragma once

// ArraySource and Label: the engine's view of the arrays it reads. A source is one zarr
// array (one path); a label is a named view of a source at a sample-axis offset, so a
// window {x: t2m, y: t2m shifted by 24} is two labels over one source (one decode).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "insitubatch/engine/sizing.h"
#include "insitubatch/util/buffer.h"
#include "insitubatch/zarr/array.h"

namespace insitubatch::engine {

// A chunk transform applied to a completed outer chunk before it is published READY (on a
// decode thread): `input` is the chunk assembled sample-first, (samples, *field) in the
// stored dtype; Apply writes (samples, *out_field) in the output dtype into `output`.
struct ChunkTransformInput {
  std::string array_path;
  int64_t chunk_index = 0;
  int64_t sample_offset = 0;  // global sample index of row 0
  uint64_t samples = 0;
  std::shared_ptr<Buffer> data;
  const SlotLayout* layout = nullptr;  // field_shape and dtype of `data`
};

class ChunkTransform {
 public:
  virtual ~ChunkTransform() = default;
  virtual Status Apply(const ChunkTransformInput& input, std::span<std::byte> output) const = 0;
  // Output field and dtype for an input of `field` x `dtype`.
  virtual std::vector<uint64_t> output_field() const = 0;
  virtual zarr::DataType output_dtype() const = 0;
  // True when Apply may write its output over its input (elementwise, same layout): the
  // engine then skips the separate output buffer.
  virtual bool in_place() const { return false; }
  // True when the transform is elementwise and in place, so it can also run on any run of
  // whole elements on its own (ApplyToRun): the engine then applies it piece by piece while
  // a whole-field chunk decodes, with each piece still in cache, and skips Apply.
  virtual bool fuses_into_decode() const { return false; }
  // `run` holds whole elements of the chunk, sample-first; `first_element` is the index of
  // its first element counted from the chunk's first element.
  virtual void ApplyToRun(std::span<std::byte> run, uint64_t first_element) const {}
};

struct ArraySource {
  std::shared_ptr<const zarr::Array> array;
  int sample_axis = 0;
  int64_t n_samples = 0;
  int64_t spc = 1;  // samples per stored chunk along the sample axis

  SlotLayout stored;                                // decoded stored chunks (tiles kept whole: edge padding included)
  SlotLayout resident;                              // what the slot holds once READY (== stored without a transform)
  std::shared_ptr<const ChunkTransform> transform;  // optional
  // The transform runs inside decode (ChunkTransform::fuses_into_decode): set when it can
  // and each outer chunk is one whole-field tile stored sample-first in the output layout.
  bool transform_in_decode = false;

  // A cropped field (FieldCrop): per field axis, the physical tile indices the slot holds,
  // in its order; empty: every tile.
  std::vector<std::vector<uint64_t>> tile_ids;

  // Validates the sample axis and derives both layouts (`transform` may be null; `crop`
  // keeps only the tiles a coordinate selection touches, and the transform sees the crop).
  static Result<ArraySource> Create(std::shared_ptr<const zarr::Array> array, int sample_axis,
                                    std::shared_ptr<const ChunkTransform> transform = nullptr,
                                    const FieldCrop& crop = {});

  const std::string& path() const { return array->path(); }
  int64_t n_chunks() const { return (n_samples + spc - 1) / spc; }
  // Pool charge of one resident outer chunk (SlotCharge).
  uint64_t slot_bytes() const { return SlotCharge(stored, resident); }
  // Physical chunk coordinates of stored tile `tile` of outer chunk `c`.
  std::vector<uint64_t> PhysicalCoords(int64_t chunk, uint64_t tile) const;
};

struct Label {
  std::string name;
  uint32_t source = 0;  // index into the engine's sources
  int64_t offset = 0;   // sample-axis shift (windows)
  // Patch samples (patches.h): per field axis of the resident layout, the patch axis it
  // is cut along, or -1 to keep it whole; empty: the label is not patched.
  std::vector<int32_t> patch_axes;
  // patch_edges="pad": one element in the resident dtype, written where a window runs past
  // the field's end (the array's fill value); empty: windows stay inside the field.
  std::vector<std::byte> pad;
};

}  // namespace insitubatch::engine
