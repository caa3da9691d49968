// Fuzzes a stored chunk of a v2 array whose numcodecs filters change the item size, with and
// without a compressor: input byte 0 picks the array, the rest is the stored chunk, decoded
// through Array::DecodeChunk (its stored-size bound first, then the chain, each stage
// bounded by what the codecs beneath it encode to). Anything must either decode or fail with
// a Status; a chunk past the array's bound must fail.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "insitubatch/io/memory_store.h"
#include "insitubatch/zarr/array.h"
#include "insitubatch/zarr/metadata.h"

namespace {

using namespace insitubatch;

// make_filter_chain_corpus.py encodes chunks for the same arrays, in this order.
const char* const kArrays[] = {
    R"({"zarr_format": 2, "shape": [4096], "chunks": [4096], "dtype": "|u1", "order": "C", "fill_value": 0,
        "filters": [{"id": "astype", "encode_dtype": "<f8", "decode_dtype": "|u1"}],
        "compressor": {"id": "zstd", "level": 1}})",
    R"({"zarr_format": 2, "shape": [4096], "chunks": [4096], "dtype": "|u1", "order": "C", "fill_value": 0,
        "filters": [{"id": "astype", "encode_dtype": "<f8", "decode_dtype": "|u1"}, {"id": "crc32"}],
        "compressor": null})",
    R"({"zarr_format": 2, "shape": [2048], "chunks": [2048], "dtype": "<i2", "order": "C", "fill_value": 0,
        "filters": [{"id": "delta", "dtype": "<i2", "astype": "<i8"}], "compressor": {"id": "zlib", "level": 1}})",
    R"({"zarr_format": 2, "shape": [4096], "chunks": [4096], "dtype": "|b1", "order": "C", "fill_value": false,
        "filters": [{"id": "packbits"}], "compressor": {"id": "lz4", "acceleration": 1}})",
    R"({"zarr_format": 2, "shape": [256], "chunks": [256], "dtype": "<U4", "order": "C", "fill_value": "",
        "filters": [{"id": "categorize", "labels": ["cat", "dog", "\u00e9meu"], "dtype": "<U4", "astype": "<u2"}],
        "compressor": {"id": "bz2", "level": 1}})",
    R"({"zarr_format": 2, "shape": [512], "chunks": [512], "dtype": "<f4", "order": "C", "fill_value": 0,
        "filters": [{"id": "fixedscaleoffset", "offset": 0, "scale": 100, "dtype": "<f4", "astype": "<i8"},
                    {"id": "shuffle", "elementsize": 8}],
        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 0, "blocksize": 0}})",
    R"({"zarr_format": 2, "shape": [512], "chunks": [512], "dtype": "<f8", "order": "C", "fill_value": 0,
        "filters": [{"id": "quantize", "digits": 3, "dtype": "<f8"}], "compressor": null})",
};

const std::vector<std::shared_ptr<const zarr::Array>>& Arrays() {
  static const auto* arrays = [] {
    auto* out = new std::vector<std::shared_ptr<const zarr::Array>>();
    auto store = std::make_shared<MemoryStore>();
    for (const char* text : kArrays) {
      auto meta = zarr::ParseArrayMetadataV2(zarr::Json::parse(text), zarr::Json(), "fuzz");
      if (!meta.ok()) std::abort();  // a broken harness, not a finding
      auto array = zarr::Array::Create(store, "f", std::move(meta).value());
      if (!array.ok() || (*array)->max_stored_bytes() == UINT64_MAX) std::abort();
      out->push_back(std::move(array).value());
    }
    return out;
  }();
  return *arrays;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& arrays = Arrays();
  const auto& array = arrays[data[0] % arrays.size()];
  // A private copy, so reads past the input are caught by the sanitizers precisely.
  std::vector<std::byte> stored(size - 1);
  if (size > 1) std::memcpy(stored.data(), data + 1, size - 1);
  std::vector<std::byte> out(array->chunk_bytes());
  const Status decoded = array->DecodeChunk(stored, {0}, out);
  if (decoded.ok() && stored.size() > array->max_stored_bytes()) std::abort();
  return 0;
}
