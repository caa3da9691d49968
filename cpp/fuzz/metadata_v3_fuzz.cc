// Fuzzes the v3 `zarr.json` parser: ParseJson, then ParseArrayMetadataV3 and the chunk
// grid arithmetic on whatever parses. Any Status is fine; crashes and sanitizer reports
// are not.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "insitubatch/zarr/metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch::zarr;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto document = ParseJson(text, "fuzz/zarr.json");
  if (!document.ok()) return 0;
  auto metadata = ParseArrayMetadataV3(*document, "fuzz/zarr.json");
  if (!metadata.ok()) return 0;
  // Validated metadata must support the arithmetic the engine does with it.
  const std::vector<uint64_t> grid = metadata->grid_shape();
  std::vector<uint64_t> last(grid.size());
  for (size_t i = 0; i < grid.size(); ++i) last[i] = grid[i] == 0 ? 0 : grid[i] - 1;
  (void)metadata->chunk_key_encoding.Key(last);
  (void)metadata->chunk_bytes();
  return 0;
}
