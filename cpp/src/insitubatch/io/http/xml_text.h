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

// The decoded text of every <tag>...</tag> element in document order (attributes on the
// opening tag allowed, <tag/> yields ""). InvalidArgument when an element is unclosed or
// its text holds markup. CDATA is not used by S3 and is rejected.
Result<std::vector<std::string>> XmlElementTexts(std::string_view xml, std::string_view tag);

// The first <tag> text, or "" when absent or malformed (for error bodies, best effort).
std::string XmlFirstText(std::string_view xml, std::string_view tag);

}  // namespace insitubatch
