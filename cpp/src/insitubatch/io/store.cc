#include "insitubatch/io/store.h"

#include <algorithm>
#include <future>
#include <unordered_map>

#include "insitubatch/util/text.h"

namespace insitubatch {

std::string ByteRange::Describe() const {
  switch (kind) {
    case Kind::kAll:
      return "";
    case Kind::kRange:
      if (length == 0) return " [bytes " + std::to_string(offset) + ", empty]";
      return " [bytes " + std::to_string(offset) + "-" + std::to_string(offset + length - 1) + "]";
    case Kind::kSuffix:
      return " [last " + std::to_string(length) + " bytes]";
    default:  // out-of-range values: the fallback below
      break;
  }
  return "";
}

Result<ReadResult> Store::Read(std::string key, ByteRange range) {
  std::promise<Result<ReadResult>> promise;
  auto future = promise.get_future();
  ReadAsync(std::move(key), range, [&promise](Result<ReadResult> r) { promise.set_value(std::move(r)); });
  return future.get();
}

Status Store::WarmConnections(const std::string& key, size_t connections) {
  INSITU_RETURN_IF_ERROR(ValidateKey(key));
  if (connections > kMaxWarmConnections) {
    return InvalidArgument("warm_connections: connections must be at most " + std::to_string(kMaxWarmConnections) +
                           ", got " + std::to_string(connections));
  }
  if (!remote()) return Status::Ok();
  ByteRange first_byte;
  first_byte.kind = ByteRange::Kind::kRange;
  first_byte.length = 1;
  for (size_t i = 0; i < connections; ++i) ReadAsync(key, first_byte, [](Result<ReadResult>) {});
  return Status::Ok();
}

Result<ReadResult> Store::ReadInline(const std::string& key, ByteRange range) {
  // Only file-like stores read on the caller; any other answers through its own path.
  return Read(key, range);
}

Result<DirListing> Store::ListDir(std::string_view dir) {
  return Unimplemented("cannot list " + Describe(dir) + " a directory at a time");
}

Result<std::vector<ObjectGeneration>> Store::ListGenerations(std::string_view prefix) {
  return Unimplemented("cannot list " + Describe(prefix) + " with object generations");
}

Result<std::vector<std::string>> Store::Generations(std::string_view prefix, const std::vector<std::string>& keys) {
  INSITU_ASSIGN_OR_RETURN(std::vector<ObjectGeneration> listing, ListGenerations(prefix));
  std::unordered_map<std::string_view, std::string_view> listed;
  listed.reserve(listing.size());
  for (const ObjectGeneration& o : listing) {
    if (o.generation.empty()) return Unimplemented(Describe(o.key) + " was listed without a generation");
    listed.emplace(o.key, o.generation);
  }
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) {
    auto it = listed.find(key);
    out.emplace_back(it == listed.end() ? std::string_view() : it->second);
  }
  return out;
}

std::string Store::WriteRefusal() const {
  return "the store was opened read-only (open it with read_only=False to write)";
}

Status Store::CheckWritable(std::string_view key) const {
  if (!writable()) return FailedPrecondition("cannot write " + Describe(key) + ": " + WriteRefusal());
  return ValidateKey(key);
}

Result<std::string> Store::CheckWritablePrefix(std::string_view prefix) const {
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (!writable()) return FailedPrecondition("cannot delete under " + Describe(prefix) + ": " + WriteRefusal());
  if (prefix.empty()) return std::string();
  INSITU_RETURN_IF_ERROR(ValidateKey(prefix));
  return std::string(prefix) + "/";
}

Result<bool> Store::WriteOwned(std::string key, Buffer value, WriteMode mode) {
  return Write(std::move(key), std::string_view(reinterpret_cast<const char*>(value.data()), value.size()), mode);
}

Result<bool> Store::Write(std::string key, std::string_view, WriteMode) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  return Unimplemented("cannot write " + Describe(key) + ": this store does not implement writes");
}

Status Store::Delete(std::string key) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  return Unimplemented("cannot delete " + Describe(key) + ": this store does not implement deletes");
}

Status Store::DeletePrefix(std::string prefix) {
  INSITU_RETURN_IF_ERROR(CheckWritablePrefix(prefix).status());
  return Unimplemented("cannot delete under " + Describe(prefix) + ": this store does not implement deletes");
}

Result<bool> HoldsExactly(Store& store, const std::string& key, std::string_view value) {
  Result<ReadResult> read = store.Read(key, ByteRange::AllAtMost(value.size()));
  if (!read.ok() && read.status().code() == StatusCode::kDataLoss) return false;  // larger than ours
  INSITU_ASSIGN_OR_RETURN(ReadResult there, std::move(read));
  if (!there.found || there.data.size() != value.size()) return false;
  return std::equal(value.begin(), value.end(), reinterpret_cast<const char*>(there.data.data()));
}

const std::vector<std::pair<std::string_view, std::string_view>>& StoreSchemes() {
  static const std::vector<std::pair<std::string_view, std::string_view>> schemes = {
      {"", "file"},    {"file", "file"}, {"memory", "memory"}, {"http", "http"}, {"https", "https"},
      {"s3", "s3"},    {"s3a", "s3"},    {"gs", "gs"},         {"gcs", "gs"},    {"az", "az"},
      {"azure", "az"}, {"abfs", "az"},   {"abfss", "az"},      {"adl", "az"},
  };
  return schemes;
}

namespace {
// Set up as the library loads, before any of its threads runs (why: BootId's in util/env.cc).
[[maybe_unused]] const bool kSchemesAtLoad = !StoreSchemes().empty();
}  // namespace

std::string_view StoreSchemeOf(std::string_view scheme) {
  const std::string lower = AsciiLower(scheme);
  for (const auto& [written, served] : StoreSchemes()) {
    if (written == lower) return served;
  }
  return {};
}

Status ValidateDir(std::string_view dir) { return dir.empty() ? Status::Ok() : ValidateKey(dir); }

Status ValidateKey(std::string_view key) {
  auto bad = [&](const char* why) { return InvalidArgument("invalid store key \"" + std::string(key) + "\": " + why); };
  if (key.empty()) return bad("empty");
  if (key.front() == '/') return bad("absolute path");
  if (key.find('\0') != std::string_view::npos) return bad("contains NUL");
  if (key.find('\\') != std::string_view::npos) return bad("contains a backslash");
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string_view::npos) end = key.size();
    std::string_view segment = key.substr(start, end - start);
    if (segment.empty()) return bad("empty path segment");
    if (segment == "." || segment == "..") return bad("'.' or '..' path segment");
    start = end + 1;
  }
  return Status::Ok();
}

}  // namespace insitubatch
