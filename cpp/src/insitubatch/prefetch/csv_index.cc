#include "insitubatch/prefetch/csv_index.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>

#include "insitubatch/util/text.h"

namespace insitubatch::prefetch {
namespace {

constexpr size_t kMaxFieldBytes = 64 * 1024;
constexpr size_t kMaxHeaderFields = 4096;

// Splits RFC 4180 records: Next() fills `fields` with one record's fields (quotes
// removed, doubled quotes collapsed) and returns false at the end of the text.
class CsvReader {
 public:
  CsvReader(std::string_view text, std::string where) : text_(text), where_(std::move(where)) {
    if (text_.starts_with("\xEF\xBB\xBF")) text_.remove_prefix(3);  // a UTF-8 byte order mark
  }

  // At most `max_fields` fields and kMaxRecordBytes bytes: memory stays O(record).
  Result<bool> Next(std::vector<std::string>* fields, size_t max_fields) {
    fields->clear();
    if (pos_ >= text_.size()) return false;
    ++line_;
    record_line_ = line_;
    const size_t record_start = pos_;
    std::string field;
    bool quoted = false;      // inside quotes
    bool was_quoted = false;  // this field began with a quote
    for (;;) {
      if (pos_ >= text_.size()) {
        if (quoted) return Error("a quoted field is not closed");
        fields->push_back(std::move(field));
        return true;
      }
      if (!quoted && !was_quoted) {  // the common case: copy up to the next special byte
        const size_t stop = text_.find_first_of(",\r\n\"", pos_);
        const size_t end = std::min(stop == std::string_view::npos ? text_.size() : stop, pos_ + kMaxFieldBytes + 1);
        field.append(text_.substr(pos_, end - pos_));
        pos_ = end;
        if (field.size() > kMaxFieldBytes) return Error("a field longer than 64 KiB");
        if (pos_ >= text_.size()) continue;
      }
      const char c = text_[pos_++];
      if (quoted) {
        if (c == '"') {
          if (pos_ < text_.size() && text_[pos_] == '"') {
            field += '"';
            ++pos_;
          } else {
            quoted = false;
          }
        } else {
          if (c == '\n') ++line_;
          field += c;
        }
      } else if (c == ',') {
        if (fields->size() + 1 >= max_fields) {
          return Error("has more than " + std::to_string(max_fields) + " fields" +
                       (max_fields == kMaxHeaderFields ? std::string() : ", the header " + std::to_string(max_fields)));
        }
        fields->push_back(std::move(field));
        field.clear();
        was_quoted = false;
      } else if (c == '\n' || c == '\r') {
        if (c == '\r' && pos_ < text_.size() && text_[pos_] == '\n') ++pos_;
        fields->push_back(std::move(field));
        return true;
      } else if (c == '"') {
        if (!field.empty() || was_quoted) return Error("a quote inside an unquoted field");
        quoted = was_quoted = true;
      } else {
        if (was_quoted) return Error("text after a closing quote");
        field += c;
      }
      if (field.size() > kMaxFieldBytes) return Error("a field longer than 64 KiB");
      if (pos_ - record_start > kMaxCsvRecordBytes) return Error("a row longer than 1 MiB");
    }
  }

  size_t line() const { return record_line_; }

  Status Error(const std::string& why) const {
    return InvalidArgument(where_ + " line " + std::to_string(line_) + ": " + why);
  }

 private:
  std::string_view text_;
  std::string where_;
  size_t pos_ = 0;
  size_t line_ = 0;
  size_t record_line_ = 0;
};

bool ParseInt(std::string_view text, int64_t* out) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  if (text.starts_with('+')) text.remove_prefix(1);
  if (text.empty()) return false;
  auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return err == std::errc() && end == text.data() + text.size();
}

}  // namespace

Result<size_t> UriSchemeEnd(std::string_view uri) {
  const size_t scheme = uri.find("://");
  if (scheme == std::string_view::npos || scheme == 0) {
    return InvalidArgument("\"" + std::string(uri.substr(0, 200)) + "\" is not a URI (scheme://bucket/key)");
  }
  return scheme;
}

Result<std::string> BucketPrefix(std::string_view uri) {
  INSITU_ASSIGN_OR_RETURN(const size_t scheme, UriSchemeEnd(uri));
  // Every local path (file:///dir/key) lies under the one root: a "bucket" of its own.
  if (AsciiLower(uri.substr(0, scheme)) == "file" && uri.size() > scheme + 4 && uri[scheme + 3] == '/') {
    return std::string(uri.substr(0, scheme + 4));
  }
  const size_t slash = uri.find('/', scheme + 3);
  if (slash == std::string_view::npos || slash == scheme + 3) {
    return InvalidArgument("\"" + std::string(uri.substr(0, 200)) + "\" names no bucket and key");
  }
  return std::string(uri.substr(0, slash + 1));
}

Result<CsvIndex> ParseCsvIndex(std::string_view text, const CsvIndexOptions& options) {
  // Every field becomes a Python str: bytes that are not UTF-8 are an error here, naming
  // where, rather than a decoding error later (or none, for a packed list).
  size_t line = 1;
  for (size_t pos = 0; pos < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[pos]);
    if (c < 0x80) {
      line += c == '\n';
      ++pos;
      continue;
    }
    const size_t at = pos;
    if (!NextUtf8(text, pos)) {
      char byte[8];
      std::snprintf(byte, sizeof(byte), "0x%02X", c);
      return InvalidArgument(options.where + " line " + std::to_string(line) + ", byte offset " + std::to_string(at) +
                             ": byte " + byte + " is not UTF-8 (an index must be UTF-8 text)");
    }
  }
  CsvReader reader(text, options.where);
  std::vector<std::string> fields;
  INSITU_ASSIGN_OR_RETURN(bool has_header, reader.Next(&fields, kMaxHeaderFields));
  if (!has_header || (fields.size() == 1 && fields[0].empty())) {
    return InvalidArgument(options.where + " is empty: an index needs a header row naming its columns");
  }
  const std::vector<std::string> header = fields;
  auto column = [&](const std::string& name) -> Result<size_t> {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return i;
    }
    std::string names;
    for (const std::string& h : header) names += (names.empty() ? "" : ", ") + h;
    return InvalidArgument(options.where + " has no column \"" + name + "\" (its columns: " + names + ")");
  };
  INSITU_ASSIGN_OR_RETURN(const size_t uri_col, column(options.uri_column));
  std::optional<size_t> label_col;
  if (!options.label_column.empty()) {
    INSITU_ASSIGN_OR_RETURN(label_col, column(options.label_column));
  }
  CsvIndex out;
  out.has_labels = label_col.has_value();
  if (options.pack && options.prefix) out.packed = KeyList(*options.prefix);
  bool prefix_known = !options.pack || options.prefix.has_value();

  for (;;) {
    INSITU_ASSIGN_OR_RETURN(bool more, reader.Next(&fields, header.size()));
    if (!more) break;
    if (fields.size() == 1 && fields[0].empty()) continue;  // a blank line
    if (fields.size() != header.size()) {
      return reader.Error("has " + std::to_string(fields.size()) + " fields, the header " +
                          std::to_string(header.size()));
    }
    std::string& uri = fields[uri_col];
    if (uri.empty()) return reader.Error("the " + options.uri_column + " field is empty");
    if (options.pack) {
      if (!prefix_known) {
        INSITU_ASSIGN_OR_RETURN(std::string prefix, BucketPrefix(uri));
        out.packed = KeyList(std::move(prefix));
        prefix_known = true;
      }
      if (Status s = out.packed.Append(uri, out.rows); !s.ok()) {
        return InvalidArgument(options.where + " line " + std::to_string(reader.line()) + ", " + s.message() +
                               (options.prefix ? ""
                                               : " (inferred from the first URI: "
                                                 "every URI must be in one bucket)"));
      }
    } else {
      out.uris.push_back(std::move(uri));
    }
    if (label_col) {
      std::string& label = fields[*label_col];
      int64_t value = 0;
      if (out.int_labels && ParseInt(label, &value)) {
        out.labels.push_back(value);
      } else {
        if (out.int_labels) {  // the first label that is not an integer: all become text
          out.int_labels = false;
          for (int64_t v : out.labels) out.text_labels.push_back(std::to_string(v));
          out.labels.clear();
        }
        out.text_labels.push_back(std::move(label));
      }
    }
    ++out.rows;
  }
  if (out.rows == 0) return InvalidArgument(options.where + " has a header but no rows");
  return out;
}

}  // namespace insitubatch::prefetch
