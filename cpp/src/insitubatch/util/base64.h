#pragma once

// Base64 (RFC 4648): decoding of untrusted text (zarr fill values of record types, inline
// chunk bytes in reference files) and encoding (signatures, JWTs).

#include <string>
#include <string_view>

#include "insitubatch/util/result.h"

namespace insitubatch {

// The bytes `text` encodes; '=' padding optional, no whitespace. InvalidArgument naming the
// first bad character's offset otherwise.
Result<std::string> DecodeBase64(std::string_view text);

// `data` in the standard alphabet with '=' padding; `url_safe`: '-' and '_', unpadded (JWTs).
std::string EncodeBase64(std::string_view data, bool url_safe = false);

}  // namespace insitubatch
