#include "insitubatch/io/store.h"

#include <future>

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
