#pragma once

// Small text helpers the stores and codecs share: ASCII trimming and lower-casing,
// percent-decoding, strict UTF-8 decoding (and escaping) of untrusted bytes, shapes and
// coordinates, errno text.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace insitubatch {

// `s` without leading and trailing spaces, tabs, CRs and LFs.
std::string_view TrimSpace(std::string_view s);

// `s` with A-Z lower-cased (other bytes unchanged).
std::string AsciiLower(std::string_view s);

// %XX escapes decoded. A '%' not followed by two hex digits is kept as it is, or, with
// `strict`, makes the result nullopt.
std::optional<std::string> PercentDecode(std::string_view s, bool strict);

// The code point of the UTF-8 sequence at `s[pos]`, advancing `pos` past it; nullopt for
// what Python's decoder refuses too (a bad or truncated sequence, an overlong form, a
// surrogate, past U+10FFFF).
std::optional<uint32_t> NextUtf8(std::string_view s, size_t& pos);

// `s` with every byte that is not part of a valid UTF-8 sequence written as \xNN (as
// Python's "backslashreplace"), so untrusted bytes quoted in a message stay printable text.
std::string EscapeInvalidUtf8(std::string_view s);

// "[2, 3, 4]": a shape or chunk coordinates, for messages.
std::string CoordsText(std::span<const uint64_t> values);

// The C library's text for errno value `err` ("No such file or directory"), for messages.
std::string ErrnoText(int err);

}  // namespace insitubatch
