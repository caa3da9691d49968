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
  registry.Register("crc32c", MakeCrc32cCodec);
  registry.Register("numcodecs.crc32c", MakeCrc32cCodec);
  registry.Register("sharding_indexed", MakeShardingCodec);
}

}  // namespace insitubatch::zarr
