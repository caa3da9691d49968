#pragma once

// Reading codec `configuration` objects. Both spellings reach the factories: v3 names as
// zarr-python 3 writes them and numcodecs configs (normalized from v2 `.zarray`), so the
// helpers accept a missing key (default) and report a wrong type or range clearly.
// Unknown keys (numcodecs' "id", zstd's "checksum" on decode) are ignored.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "insitubatch/util/result.h"
#include "insitubatch/zarr/metadata.h"

namespace insitubatch::zarr::internal_codec {

// InvalidArgument unless `config` is an object or null (null = no configuration).
Status CheckConfigObject(const Json& config);

// The integer at `key`, `default_value` when absent; InvalidArgument when it is not an
// integer in [min, max].
Result<int64_t> ConfigInt(const Json& config, std::string_view key, int64_t default_value, int64_t min, int64_t max);

// The string at `key`, nullopt when absent; InvalidArgument when it is not a string.
Result<std::optional<std::string>> ConfigString(const Json& config, std::string_view key);

// A byte count for messages: "4096 bytes", "1 byte".
std::string Bytes(uint64_t n);

}  // namespace insitubatch::zarr::internal_codec
