// Fuzzes the v2 `.zarray` parser and its normalization to the v3 form. The input is one
// JSON document: either a `.zarray`, or {".zarray": ..., ".zattrs": ...} to reach the
// attribute path too. Any Status is fine; crashes and sanitizer reports are not.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "insitubatch/zarr/metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch::zarr;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto document = ParseJson(text, "fuzz/.zarray");
  if (!document.ok()) return 0;
  const Json* zarray = &*document;
  Json zattrs;
  if (document->is_object() && document->contains(".zarray")) {
    zarray = &(*document)[".zarray"];
    if (auto it = document->find(".zattrs"); it != document->end()) zattrs = *it;
  }
  auto metadata = ParseArrayMetadataV2(*zarray, zattrs, "fuzz/.zarray");
  if (!metadata.ok()) return 0;
  const std::vector<uint64_t> grid = metadata->grid_shape();
  std::vector<uint64_t> last(grid.size());
  for (size_t i = 0; i < grid.size(); ++i) last[i] = grid[i] == 0 ? 0 : grid[i] - 1;
  (void)metadata->chunk_key_encoding.Key(last);
  (void)metadata->chunk_bytes();
  return 0;
}
