// Fuzzes the kerchunk reference parser (reference_store: a user's or a stranger's JSON, any
// bytes), then reads every key through a ReferenceStore over an in-memory target holding
// a few bytes. Any Status is fine; crashes, hangs and sanitizer reports are not.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "insitubatch/io/memory_store.h"
#include "insitubatch/io/references/reference_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch;
  auto set = ReferenceSet::ParseJson(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!set.ok()) return 0;
  auto memory = std::make_shared<MemoryStore>();
  memory->Set("t", "0123456789");
  std::vector<ReferenceTarget> targets(set->targets().size(), ReferenceTarget{memory, "t"});
  const std::vector<std::string> keys = set->Keys("");
  auto store = ReferenceStore::Open(std::move(*set), std::move(targets), "fuzz");
  if (!store.ok()) return 0;
  size_t n = 0;
  for (const std::string& key : keys) {
    if (++n > 256) break;
    (void)(*store)->Read(key);
    (void)(*store)->Read(key, ByteRange::Range(1, 3));
    (void)(*store)->Read(key, ByteRange::Suffix(2));
    (void)(*store)->Describe(key);
  }
  return 0;
}
