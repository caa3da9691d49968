#pragma once

#include <memory>

#include "bindings.h"
#include "insitubatch/engine/source.h"

namespace insitubatch::python {

// Builds the engine's transform for one array from the Python-side spec (None, or a dict
// with "kind": "python" | "scale", "out_shape", "out_dtype", and the kind's fields).
std::shared_ptr<const engine::ChunkTransform> TransformFromSpec(nb::handle spec);

// A numpy array viewing a shared buffer (the array keeps the buffer alive).
nb::object SharedToNumpy(std::shared_ptr<Buffer> buffer, const std::vector<uint64_t>& shape, zarr::DataType dtype);

}  // namespace insitubatch::python
