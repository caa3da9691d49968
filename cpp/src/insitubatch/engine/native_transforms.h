#pragma once

// The chunk transforms the engine runs without Python: a standard scaler (y = (x - mean) *
// scale), a cast, and a scale-offset (y = Out(x) * scale + offset). All are elementwise and
// take no lock; the scaler and a same-type scale-offset also fuse into decode (they run on
// each decoded piece while it is in cache).

#include <memory>
#include <vector>

#include "insitubatch/engine/source.h"
#include "insitubatch/util/result.h"

namespace insitubatch::engine {

// float32 or float64 in and out, `dtype`; `mean` and `scale` hold one number for the whole
// field, or one per field element (prod(field) of them).
Result<std::shared_ptr<const ChunkTransform>> MakeStandardScaler(std::vector<double> mean, std::vector<double> scale,
                                                                 std::vector<uint64_t> field, zarr::DataType dtype);
// Between real numeric types (integers, float32, float64; not bool, float16 or complex).
Result<std::shared_ptr<const ChunkTransform>> MakeCast(zarr::DataType in, zarr::DataType out,
                                                       std::vector<uint64_t> field);
// `out` is float32 or float64; the product and sum are computed in `out` and rounded
// separately, as numpy's are.
Result<std::shared_ptr<const ChunkTransform>> MakeScaleOffset(zarr::DataType in, zarr::DataType out, double scale,
                                                              double offset, std::vector<uint64_t> field);

}  // namespace insitubatch::engine
