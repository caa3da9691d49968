// libFuzzer target: the zstd decoder on arbitrary bytes (see codec_fuzz_util.h).

#include "codec_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch::zarr;
  static const auto codec = fuzz::MakeCodec("zstd", Json::parse(R"({"level": 3})"));
  fuzz::FuzzBytesToBytes(*codec, data, size);
  return 0;
}
