// Fuzzes base64 decoding (record fill values, inline reference chunks): any Status is fine,
// and a successful decode re-checks its length; crashes and sanitizer reports are not.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "insitubatch/util/base64.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto decoded = insitubatch::DecodeBase64(text);
  if (decoded.ok() && decoded->size() > text.size() / 4 * 3 + 2) std::abort();
  return 0;
}
