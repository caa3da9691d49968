#include "insitubatch/zarr/codec/registry.h"

namespace insitubatch::zarr {

void CodecRegistry::Register(std::string name, CodecFactory factory) {
  factories_[std::move(name)] = std::move(factory);
}

Result<AnyCodec> CodecRegistry::Create(const CodecSpec& spec, const ArrayRepr& repr) const {
  auto it = factories_.find(spec.name);
  if (it == factories_.end()) {
    return Unimplemented("codec \"" + spec.name + "\" is not supported");
  }
  auto codec = it->second(spec.configuration, repr, *this);
  if (!codec.ok()) return codec.status().WithContext("codec \"" + spec.name + "\"");
  return codec;
}

const CodecRegistry& BuiltinCodecRegistry() {
  static const CodecRegistry* registry = [] {
    auto* r = new CodecRegistry();
    RegisterBuiltinCodecs(*r);
    return r;
  }();
  return *registry;
}

}  // namespace insitubatch::zarr
