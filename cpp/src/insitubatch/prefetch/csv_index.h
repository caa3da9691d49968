#pragma once

// The CSV index of an object-per-sample dataset: one row per sample, a column of object
// URIs and (optionally) a column of class labels. RFC 4180 fields (quoted fields may hold
// commas, doubled quotes and line breaks; LF or CRLF rows); the first row names the
// columns. Untrusted input: every malformed row is an error naming its line, and memory
// stays O(row): a row has at most the header's fields (the header at most 4096), a field
// at most 64 KiB, a row at most kMaxCsvRecordBytes; the text must be UTF-8 (an error
// names the line and byte offset of the first byte that is not).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/prefetch/key_list.h"
#include "insitubatch/util/result.h"

namespace insitubatch::prefetch {

inline constexpr size_t kMaxCsvRecordBytes = size_t{1} << 20;

struct CsvIndexOptions {
  std::string uri_column;
  std::string label_column;  // "" = no labels
  // Pack the URIs into a KeyList under this prefix; "" with `pack` = infer it from the
  // first URI ("scheme://bucket/"). Without `pack` the URIs are returned as strings.
  bool pack = false;
  std::optional<std::string> prefix;
  std::string where;  // the file, for messages
};

struct CsvIndex {
  size_t rows = 0;
  KeyList packed;                 // pack: the URIs
  std::vector<std::string> uris;  // not pack: the URIs
  bool has_labels = false;
  bool int_labels = true;                // every label parses as a (64-bit) integer
  std::vector<int64_t> labels;           // int_labels
  std::vector<std::string> text_labels;  // otherwise
};

Result<CsvIndex> ParseCsvIndex(std::string_view text, const CsvIndexOptions& options);

// Where a URI's "://" starts (its scheme's length); InvalidArgument, quoting the URI, when
// it has no scheme: the check every URI of an index or the object cache passes first.
Result<size_t> UriSchemeEnd(std::string_view uri);

// "scheme://authority/" of a URI: the part every URI of one bucket shares; "file:///"
// for every local path. The one rule of both packages (insitubatch.urls.bucket_prefix).
Result<std::string> BucketPrefix(std::string_view uri);

}  // namespace insitubatch::prefetch
