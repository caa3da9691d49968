#include "insitubatch/io/http/xml_text.h"

#include <cstdint>

namespace insitubatch {
namespace {

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Result<uint32_t> ParseCharRef(std::string_view ref) {  // "#65" or "#x41"
  const bool hex = ref.size() > 1 && (ref[1] == 'x' || ref[1] == 'X');
  std::string_view digits = ref.substr(hex ? 2 : 1);
  if (digits.empty() || digits.size() > 8) return InvalidArgument("bad character reference");
  uint32_t cp = 0;
  for (char c : digits) {
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (hex && c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (hex && c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      return InvalidArgument("bad character reference");
    }
    cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
    if (cp > 0x10FFFF) return InvalidArgument("character reference past U+10FFFF");
  }
  if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return InvalidArgument("character reference to NUL or a surrogate");
  }
  return cp;
}

}  // namespace

Result<std::string> XmlUnescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c != '&') {
      out.push_back(c);
      ++i;
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) {
      return InvalidArgument("xml: unterminated entity in \"" + std::string(text.substr(i, 16)) + "\"");
    }
    const std::string_view name = text.substr(i + 1, semi - i - 1);
    if (name == "amp") {
      out.push_back('&');
    } else if (name == "lt") {
      out.push_back('<');
    } else if (name == "gt") {
      out.push_back('>');
    } else if (name == "quot") {
      out.push_back('"');
    } else if (name == "apos") {
      out.push_back('\'');
    } else if (!name.empty() && name[0] == '#') {
      auto cp = ParseCharRef(name);
      if (!cp.ok()) {
        return InvalidArgument("xml: " + cp.status().message() + " &" + std::string(name) + ";");
      }
      AppendUtf8(*cp, out);
    } else {
      return InvalidArgument("xml: unknown entity &" + std::string(name) + ";");
    }
    i = semi + 1;
  }
  return out;
}

Result<std::vector<XmlElement>> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<XmlElement> elements;
  const std::string open = "<" + std::string(tag);
  const std::string close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    const size_t name_end = pos + open.size();
    // "<Key>" or "<Key attr=...>" but not "<KeyCount>".
    if (name_end >= xml.size()) return InvalidArgument("xml: truncated <" + std::string(tag));
    const char next = xml[name_end];
    if (next != '>' && next != ' ' && next != '/' && next != '\t' && next != '\n' && next != '\r') {
      pos = name_end;
      continue;
    }
    const size_t gt = xml.find('>', name_end);
    if (gt == std::string_view::npos) {
      return InvalidArgument("xml: unclosed <" + std::string(tag) + " tag");
    }
    if (xml[gt - 1] == '/') {  // <Key/>
      elements.push_back({std::string(xml.substr(name_end, gt - 1 - name_end)), ""});
      pos = gt + 1;
      continue;
    }
    const size_t end = xml.find(close, gt + 1);
    if (end == std::string_view::npos) {
      return InvalidArgument("xml: <" + std::string(tag) + "> is never closed");
    }
    const std::string_view raw = xml.substr(gt + 1, end - gt - 1);
    if (raw.find('<') != std::string_view::npos) {
      return InvalidArgument("xml: <" + std::string(tag) + "> holds markup, not text");
    }
    INSITU_ASSIGN_OR_RETURN(std::string text, XmlUnescape(raw));
    elements.push_back({std::string(xml.substr(name_end, gt - name_end)), std::move(text)});
    pos = end + close.size();
  }
  return elements;
}

Result<std::vector<std::string>> XmlElementTexts(std::string_view xml, std::string_view tag) {
  INSITU_ASSIGN_OR_RETURN(std::vector<XmlElement> elements, XmlElements(xml, tag));
  std::vector<std::string> texts;
  texts.reserve(elements.size());
  for (XmlElement& e : elements) texts.push_back(std::move(e.text));
  return texts;
}

bool XmlHasAttribute(std::string_view attributes, std::string_view name, std::string_view value) {
  for (const char quote : {'"', '\''}) {
    const std::string wanted = std::string(name) + "=" + quote + std::string(value) + quote;
    for (size_t at = attributes.find(wanted); at != std::string_view::npos; at = attributes.find(wanted, at + 1)) {
      // A whole attribute name: `Encoded=` but not `NotEncoded=`.
      if (at == 0 || attributes[at - 1] == ' ' || attributes[at - 1] == '\t' || attributes[at - 1] == '\n' ||
          attributes[at - 1] == '\r') {
        return true;
      }
    }
  }
  return false;
}

std::string XmlFirstText(std::string_view xml, std::string_view tag) {
  auto texts = XmlElementTexts(xml, tag);
  if (!texts.ok() || texts->empty()) return "";
  return std::move(texts->front());
}

}  // namespace insitubatch
