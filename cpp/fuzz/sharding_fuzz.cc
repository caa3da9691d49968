// Fuzzes the sharding_indexed decoder: input byte 0 picks one of a few fixed shard
// configurations (with and without an index checksum, index at the end or start, nested
// sharding), the rest is the shard. Anything must either decode or fail with a Status;
// decoded inner chunk by inner chunk (Split, last first) it must decode to the same bytes
// or fail too; a shard that decodes must survive an encode/decode round trip unchanged.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "insitubatch/zarr/codec/codec_chain.h"
#include "insitubatch/zarr/codec/registry.h"

namespace {

using insitubatch::zarr::ArrayRepr;
using insitubatch::zarr::BuiltinCodecRegistry;
using insitubatch::zarr::CodecChain;
using insitubatch::zarr::CodecSpec;
using insitubatch::zarr::DataType;
using insitubatch::zarr::DataTypeId;
using insitubatch::zarr::Json;

// Shard [4, 4] of uint16 in inner chunks [2, 2]; make_sharding_corpus.py writes the same.
const char* const kConfigs[] = {
    R"({"chunk_shape": [2, 2],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                         {"name": "crc32c"}]})",
    R"({"chunk_shape": [2, 2],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]})",
    R"({"chunk_shape": [2, 2], "index_location": "start",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                         {"name": "crc32c"}]})",
    R"({"chunk_shape": [2, 2],
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [1, 1],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "zstd"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]})",
};
constexpr size_t kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);

const std::vector<CodecChain>& Chains() {
  static const std::vector<CodecChain>* chains = [] {
    auto* out = new std::vector<CodecChain>();
    const ArrayRepr repr{{4, 4}, DataType{DataTypeId::kUInt16}, {}};
    for (const char* config : kConfigs) {
      auto chain =
          CodecChain::Build({CodecSpec{"sharding_indexed", Json::parse(config)}}, repr, BuiltinCodecRegistry());
      if (!chain.ok()) std::abort();  // a broken harness, not a finding
      out->push_back(std::move(chain).value());
    }
    return out;
  }();
  return *chains;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const CodecChain& chain = Chains()[data[0] % kNumConfigs];
  const std::span<const std::byte> shard(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  std::vector<std::byte> out(chain.repr().nbytes());
  const bool decoded = chain.DecodeInto(shard, out).ok();

  auto parts = chain.Split(shard);
  bool parts_decoded = parts.ok() && *parts != nullptr;
  std::vector<std::byte> by_parts(out.size());
  for (uint64_t i = parts_decoded ? (*parts)->count() : 0; i-- > 0;) {
    parts_decoded = parts_decoded && (*parts)->DecodePart(i, by_parts).ok();
  }
  if (parts_decoded != decoded) std::abort();
  if (!decoded) return 0;
  if (std::memcmp(out.data(), by_parts.data(), out.size()) != 0) std::abort();

  auto encoded = chain.Encode(out);
  if (!encoded.ok()) std::abort();
  std::vector<std::byte> again(out.size());
  if (!chain.DecodeInto(encoded->span(), again).ok()) std::abort();
  if (std::memcmp(out.data(), again.data(), out.size()) != 0) std::abort();
  return 0;
}
