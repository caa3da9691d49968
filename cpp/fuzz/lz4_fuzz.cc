// libFuzzer target: the numcodecs.lz4 decoder on arbitrary bytes (see codec_fuzz_util.h).

#include "codec_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch::zarr;
  static const auto codec = fuzz::MakeCodec("numcodecs.lz4", Json::parse(R"({})"));
  fuzz::FuzzBytesToBytes(*codec, data, size);
  return 0;
}
