#include "insitubatch/util/text.h"

#include <system_error>

namespace insitubatch {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

std::string CoordsText(std::span<const uint64_t> values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i != 0 ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::optional<std::string> PercentDecode(std::string_view s, bool strict) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const int hi = s[i] == '%' && i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
    const int lo = hi >= 0 ? HexValue(s[i + 2]) : -1;
    if (lo >= 0) {
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (s[i] == '%' && strict) {
      return std::nullopt;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::optional<uint32_t> NextUtf8(std::string_view s, size_t& pos) {
  if (pos >= s.size()) return std::nullopt;
  const auto c = static_cast<unsigned char>(s[pos]);
  const int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (extra < 0 || s.size() - pos <= static_cast<size_t>(extra)) return std::nullopt;
  uint32_t cp = extra == 0 ? c : c & (0x3Fu >> extra);
  for (int k = 1; k <= extra; ++k) {
    const auto cc = static_cast<unsigned char>(s[pos + k]);
    if ((cc >> 6) != 2) return std::nullopt;
    cp = (cp << 6) | (cc & 0x3Fu);
  }
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  pos += 1 + extra;
  return cp;
}

std::string EscapeInvalidUtf8(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    if (NextUtf8(s, pos)) {
      out.append(s.substr(start, pos - start));
      continue;
    }
    const auto c = static_cast<unsigned char>(s[pos++]);
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

}  // namespace insitubatch
