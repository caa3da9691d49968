// libFuzzer target: the numcodecs.zlib decoder on arbitrary bytes (see
// codec_fuzz_util.h).

#include "codec_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch::zarr;
  static const auto codec = fuzz::MakeCodec("numcodecs.zlib", Json::parse(R"({"level": 1})"));
  fuzz::FuzzBytesToBytes(*codec, data, size);
  return 0;
}
