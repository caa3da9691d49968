#pragma once

// Base64 (RFC 4648, standard alphabet) decoding of untrusted text: zarr fill values of
// record types, inline chunk bytes in reference files.

#include <string>
#include <string_view>

#include "insitubatch/util/result.h"

namespace insitubatch {

// The bytes `text` encodes; '=' padding optional, no whitespace. InvalidArgument naming the
// first bad character's offset otherwise.
Result<std::string> DecodeBase64(std::string_view text);

}  // namespace insitubatch
