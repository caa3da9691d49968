#include "insitubatch/zarr/codec/builtin_codecs.h"

namespace insitubatch::zarr {

// The one list of codecs this build understands. v3 names first; numcodecs names are the
// ones zarr-python 3 writes for codecs outside the v3 core set; v2 compressor ids are
// mapped onto these names when `.zarray` is normalized.
void RegisterBuiltinCodecs(CodecRegistry& registry) {
  registry.Register("bytes", MakeBytesCodec);
  registry.Register("transpose", MakeTransposeCodec);
  registry.Register("zstd", MakeZstdCodec);
  registry.Register("numcodecs.zstd", MakeZstdCodec);
  registry.Register("blosc", MakeBloscCodec);
  registry.Register("numcodecs.blosc", MakeBloscCodec);
  registry.Register("gzip", MakeGzipCodec);
  registry.Register("numcodecs.gzip", MakeGzipCodec);
  registry.Register("numcodecs.zlib", MakeZlibCodec);
  registry.Register("numcodecs.lz4", MakeLz4Codec);
  registry.Register("numcodecs.shuffle", MakeShuffleCodec);
  registry.Register("numcodecs.base64", MakeBase64Codec);
  // numcodecs' numeric filters: bytes -> bytes under their v2 ids (a .zarray's "filters"
  // run after serialization), array -> array under the v3 names zarr-python 3 writes.
  registry.Register("delta", MakeDeltaCodec);
  registry.Register("fixedscaleoffset", MakeFixedScaleOffsetCodec);
  registry.Register("astype", MakeAsTypeCodec);
  registry.Register("quantize", MakeQuantizeCodec);
  registry.Register("bitround", MakeBitRoundCodec);
  registry.Register("packbits", MakePackBitsCodec);
  registry.Register("categorize", MakeCategorizeCodec);
  registry.Register("numcodecs.delta", MakeDeltaArrayCodec);
  registry.Register("numcodecs.fixedscaleoffset", MakeFixedScaleOffsetArrayCodec);
  registry.Register("numcodecs.astype", MakeAsTypeArrayCodec);
  registry.Register("numcodecs.quantize", MakeQuantizeArrayCodec);
  registry.Register("numcodecs.bitround", MakeBitRoundArrayCodec);
  registry.Register("numcodecs.packbits", MakePackBitsArrayCodec);
  registry.Register("numcodecs.categorize", MakeCategorizeArrayCodec);
  registry.Register("numcodecs.crc32", MakeCrc32Codec);
  registry.Register("numcodecs.adler32", MakeAdler32Codec);
  registry.Register("numcodecs.fletcher32", MakeFletcher32Codec);
  registry.Register("numcodecs.jenkins_lookup3", MakeJenkinsLookup3Codec);
  registry.Register("numcodecs.bz2", MakeBz2Codec);
  registry.Register("numcodecs.lzma", MakeLzmaCodec);
  registry.Register("crc32c", MakeCrc32cCodec);
  registry.Register("numcodecs.crc32c", MakeCrc32cCodec);
  registry.Register("sharding_indexed", MakeShardingCodec);
}

}  // namespace insitubatch::zarr
