#pragma once

// CodecRegistry: codec name -> factory. Built explicitly (RegisterBuiltinCodecs in
// builtin.cc lists every codec), never through static initializers.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>

#include "insitubatch/zarr/codec/codec.h"

namespace insitubatch::zarr {

class CodecRegistry;

using AnyCodec = std::variant<std::shared_ptr<const ArrayToArrayCodec>, std::shared_ptr<const ArrayToBytesCodec>,
                              std::shared_ptr<const BytesToBytesCodec>>;

// `repr` is the representation entering the codec (the sharding codec needs the shard
// shape to validate its chunk_shape and build its inner chain from the registry).
using CodecFactory =
    std::function<Result<AnyCodec>(const Json& configuration, const ArrayRepr& repr, const CodecRegistry& registry)>;

class CodecRegistry {
 public:
  void Register(std::string name, CodecFactory factory);
  // Unimplemented naming the codec when `spec.name` is unknown.
  Result<AnyCodec> Create(const CodecSpec& spec, const ArrayRepr& repr) const;
  bool Has(const std::string& name) const { return factories_.count(name) != 0; }

 private:
  std::map<std::string, CodecFactory> factories_;
};

// Adds every codec this build supports.
void RegisterBuiltinCodecs(CodecRegistry& registry);
// A process-wide registry holding the builtin codecs.
const CodecRegistry& BuiltinCodecRegistry();

}  // namespace insitubatch::zarr
