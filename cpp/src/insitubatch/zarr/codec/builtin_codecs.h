#pragma once

// Factories of the builtin codecs, one per file in this folder; builtin.cc registers them.

#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr {

Result<AnyCodec> MakeBytesCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeTransposeCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeZstdCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeBloscCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeGzipCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeZlibCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeLz4Codec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeDeltaCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeFixedScaleOffsetCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeAsTypeCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeQuantizeCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeBitRoundCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakePackBitsCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeCategorizeCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeDeltaArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeFixedScaleOffsetArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeAsTypeArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeQuantizeArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeBitRoundArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakePackBitsArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeCategorizeArrayCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeCrc32Codec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeAdler32Codec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeFletcher32Codec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeJenkinsLookup3Codec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeBz2Codec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeLzmaCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeShuffleCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeBase64Codec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeCrc32cCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeShardingCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry& registry);

}  // namespace insitubatch::zarr
