// Fuzzes the cache log parser: a cache directory's insitu_cache.jsonl is read back on
// every reopen and may be torn by a crash or edited by anyone. Any Status is fine;
// crashes and sanitizer reports are not, and every file name accepted must be a bare one.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "insitubatch/cache/files.h"
#include "insitubatch/cache/log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch::cache;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = ParseLog(text, "fuzz");
  if (parsed.ok()) {
    for (const LogEntry& e : parsed->entries) {
      if (!CheckBasename(e.file, "fuzz").ok()) std::abort();  // a path escaped the check
    }
  }
  return 0;
}
