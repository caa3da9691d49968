#pragma once

// numcodecs' Categorize over an object array (dtype "|O", as zarr-python 2 wrote string
// labels): integer codes to variable-length UTF-8 labels. Such a filter is a v2 "|O"
// array's object codec, so the string reader (string_array.cc) applies it where vlen-utf8
// would be. (Categorize to fixed-width unicode is a bytes codec: numeric_filters.cc.)

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "insitubatch/util/result.h"
#include "insitubatch/zarr/codec/codec.h"
#include "insitubatch/zarr/metadata.h"

namespace insitubatch::zarr {

class CategorizeStrings {
 public:
  virtual ~CategorizeStrings() = default;

  // {"labels": [...], "dtype": "|O", "astype": "|u1" (default)}; InvalidArgument or
  // Unimplemented naming what is wrong.
  static Result<std::shared_ptr<const CategorizeStrings>> Make(const Json& config);

  // The `n` items the codes in `codes` stand for: code i + 1 is labels[i], any other code
  // "" (as numcodecs decodes it). DataLoss when `codes` does not hold n codes or the items
  // would exceed `max_bytes` together.
  virtual Result<std::vector<std::string>> Decode(ByteSpan codes, uint64_t n, size_t max_bytes) const = 0;
  // Bytes of one stored code.
  virtual size_t code_size() const = 0;
};

}  // namespace insitubatch::zarr
