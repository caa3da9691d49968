#pragma once

// Factories of the builtin codecs, one per file in this folder; builtin.cc registers them.

#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr {

Result<AnyCodec> MakeBytesCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeTransposeCodec(const Json& config, const ArrayRepr& repr,
                                    const CodecRegistry&);
Result<AnyCodec> MakeZstdCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeBloscCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeGzipCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeZlibCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeLz4Codec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeShuffleCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeCrc32cCodec(const Json& config, const ArrayRepr& repr, const CodecRegistry&);
Result<AnyCodec> MakeShardingCodec(const Json& config, const ArrayRepr& repr,
                                   const CodecRegistry& registry);

}  // namespace insitubatch::zarr
