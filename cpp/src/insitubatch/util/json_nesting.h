#pragma once

// A pre-parse guard for untrusted JSON (zarr metadata, reference files): deeply nested
// documents would make copies, comparisons and dumps of the parsed value recurse without
// bound, and no document we read needs more than a few levels.

#include <string_view>

namespace insitubatch {

// The deepest nesting of [ and { in `text` (strings skipped), stopping early once it
// passes `limit`.
int JsonNestingDepth(std::string_view text, int limit);

}  // namespace insitubatch
