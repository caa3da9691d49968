#include "insitubatch/util/base64.h"

#include <array>

namespace insitubatch {
namespace {

constexpr std::array<int8_t, 256> MakeTable() {
  std::array<int8_t, 256> table{};
  for (auto& v : table) v = -1;
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
  return table;
}

constexpr std::array<int8_t, 256> kTable = MakeTable();

}  // namespace

Result<std::string> DecodeBase64(std::string_view text) {
  size_t end = text.size();
  while (end > 0 && text.size() - end < 2 && text[end - 1] == '=') --end;  // at most two pads
  if (end % 4 == 1 || (end != text.size() && text.size() % 4 != 0)) {
    return InvalidArgument("base64 text of " + std::to_string(text.size()) + " characters has a bad length");
  }
  std::string out;
  out.reserve(end / 4 * 3 + 2);
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < end; ++i) {
    const int8_t v = kTable[static_cast<unsigned char>(text[i])];
    if (v < 0) return InvalidArgument("base64 text has a bad character at offset " + std::to_string(i));
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if (++count == 4) {
      out.push_back(static_cast<char>(bits >> 16));
      out.push_back(static_cast<char>(bits >> 8));
      out.push_back(static_cast<char>(bits));
      bits = 0;
      count = 0;
    }
  }
  if (count == 2) out.push_back(static_cast<char>(bits >> 4));
  if (count == 3) {
    out.push_back(static_cast<char>(bits >> 10));
    out.push_back(static_cast<char>(bits >> 2));
  }
  return out;
}

std::string EncodeBase64(std::string_view data, bool url_safe) {
  const char* alphabet = url_safe ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                                  : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  uint32_t bits = 0;
  int count = 0;
  for (unsigned char c : data) {
    bits = (bits << 8) | c;
    count += 8;
    while (count >= 6) {
      count -= 6;
      out += alphabet[(bits >> count) & 63];
    }
  }
  if (count > 0) out += alphabet[(bits << (6 - count)) & 63];
  if (!url_safe) out.append((4 - out.size() % 4) % 4, '=');
  return out;
}

}  // namespace insitubatch
