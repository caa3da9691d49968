// Fuzzes the CSV index parser (planfetch's load_index_csv): a user's file, any bytes. The
// first byte picks the options (packed or not, labels or not). Any Status is fine; crashes
// and sanitizer reports are not, and a packed list must give back what it was given.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "insitubatch/prefetch/csv_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch::prefetch;
  if (size == 0) return 0;
  CsvIndexOptions options;
  options.uri_column = "s3_path";
  options.label_column = (data[0] & 1) ? "class_id" : "";
  options.pack = (data[0] & 2) != 0;
  options.where = "fuzz";
  auto index = ParseCsvIndex(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), options);
  if (index.ok() && options.pack) {
    auto back = KeyList::Deserialize(index->packed.Serialize());
    if (!back.ok() || !(*back == index->packed)) std::abort();
  }
  return 0;
}
