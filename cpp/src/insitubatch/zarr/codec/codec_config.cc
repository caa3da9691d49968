#include "insitubatch/zarr/codec/codec_config.h"

namespace insitubatch::zarr::internal_codec {
namespace {

// `"key" <what>, got <value>` (built with append: GCC 12 warns falsely about
// -Wrestrict on chains of operator+ starting from a literal).
std::string KeyMessage(std::string_view key, std::string_view what, const Json& got) {
  std::string m;
  m.append("\"").append(key).append("\" ").append(what).append(", got ").append(got.dump());
  return m;
}

}  // namespace

Status CheckConfigObject(const Json& config) {
  if (config.is_null() || config.is_object()) return Status::Ok();
  return InvalidArgument("configuration must be an object, got " + config.dump());
}

Result<int64_t> ConfigInt(const Json& config, std::string_view key, int64_t default_value, int64_t min, int64_t max) {
  if (!config.is_object()) return default_value;
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return default_value;
  std::string range;
  range.append("[").append(std::to_string(min)).append(", ").append(std::to_string(max));
  range.append("]");
  if (!it->is_number_integer()) {
    return InvalidArgument(KeyMessage(key, "must be an integer in " + range, *it));
  }
  // Unsigned JSON values above INT64_MAX read as negative through get<int64_t>.
  const bool too_big = it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(max);
  const int64_t value = it->get<int64_t>();
  if (too_big || value < min || value > max) {
    return InvalidArgument(KeyMessage(key, "must be in " + range, *it));
  }
  return value;
}

Result<std::optional<std::string>> ConfigString(const Json& config, std::string_view key) {
  if (!config.is_object()) return std::optional<std::string>();
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return InvalidArgument(KeyMessage(key, "must be a string", *it));
  return std::optional<std::string>(it->get<std::string>());
}

std::string Bytes(uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

}  // namespace insitubatch::zarr::internal_codec
