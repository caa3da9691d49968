#pragma once

// Just enough XML for S3 replies (ListObjectsV2 pages, <Error> documents): the decoded
// text of simple elements, found by tag. Not a general parser: S3's replies are flat,
// element text never contains markup, and anything malformed is an error, not a guess.

#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/util/result.h"

namespace insitubatch {

// Decodes the five predefined entities and numeric references (&#65; &#x41;). A
// malformed or unknown entity, or a reference to NUL or past U+10FFFF, is
// InvalidArgument.
Result<std::string> XmlUnescape(std::string_view text);

// One <tag ...>text</tag> element: its decoded text and the raw attributes of its
// opening tag (what lies between the tag name and '>', e.g. ` Encoded="true"`).
struct XmlElement {
  std::string attributes;
  std::string text;
};

// Every <tag>...</tag> element in document order (<tag/> yields an empty text).
// InvalidArgument when an element is unclosed or its text holds markup. CDATA is not
// used by S3 or Azure and is rejected.
Result<std::vector<XmlElement>> XmlElements(std::string_view xml, std::string_view tag);

// The decoded texts of XmlElements(xml, tag).
Result<std::vector<std::string>> XmlElementTexts(std::string_view xml, std::string_view tag);

// Whether `attributes` (an XmlElement's) hold name="value" (or name='value').
bool XmlHasAttribute(std::string_view attributes, std::string_view name, std::string_view value);

// The first <tag> text, or "" when absent or malformed (for error bodies, best effort).
std::string XmlFirstText(std::string_view xml, std::string_view tag);

}  // namespace insitubatch
