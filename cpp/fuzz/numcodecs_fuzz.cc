// libFuzzer target: numcodecs' filters (categorize too), checksums and the bz2 / lzma
// compressors (lzma's FORMAT_RAW chains too), decoded from arbitrary bytes (see
// codec_fuzz_util.h). The first byte picks the codec; the seed
// corpus (make_numcodecs_corpus.py) holds a valid encoding for each.

#include "codec_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch::zarr;
  static const std::vector<std::shared_ptr<const BytesToBytesCodec>> codecs = [] {
    std::vector<std::shared_ptr<const BytesToBytesCodec>> out;
    for (const char* spec : {
             R"(["delta", {"dtype": "<i4"}])",
             R"(["delta", {"dtype": "<f8", "astype": "<i2"}])",
             R"(["fixedscaleoffset", {"offset": 3.5, "scale": 10, "dtype": "<f4", "astype": "u1"}])",
             R"(["astype", {"encode_dtype": ">i2", "decode_dtype": "<f8"}])",
             R"(["quantize", {"digits": 2, "dtype": "<f4"}])",
             R"(["packbits", {}])",
             R"(["numcodecs.crc32", {}])",
             R"(["numcodecs.adler32", {"location": "end"}])",
             R"(["numcodecs.fletcher32", {}])",
             R"(["numcodecs.bz2", {}])",
             R"(["numcodecs.lzma", {}])",
             R"(["numcodecs.shuffle", {"elementsize": 8}])",
             R"(["categorize", {"labels": ["cat", "dog", "\u00e9meu"], "dtype": "<U4", "astype": "|u1"}])",
             R"(["numcodecs.jenkins_lookup3", {"initval": 7}])",
             R"(["numcodecs.lzma", {"format": 3, "filters": [{"id": 3, "dist": 4}, {"id": 33, "preset": 1}]}])",
             R"(["numcodecs.lzma", {"format": 3, "filters": [{"id": 4611686018427387905, "lc": 1, "pb": 0}]}])",
         }) {
      const Json j = Json::parse(spec);
      out.push_back(fuzz::MakeCodec(j[0].get<std::string>(), j[1]));
    }
    return out;
  }();
  if (size == 0) return 0;
  fuzz::FuzzBytesToBytes(*codecs[data[0] % codecs.size()], data + 1, size - 1);
  return 0;
}
