#include "insitubatch/io/memory_store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "insitubatch/util/crc32c.h"

namespace insitubatch {

Result<ResolvedRange> ResolveRange(ByteRange range, uint64_t size) {
  auto past_end = [&]() {
    return DataLoss("object is " + std::to_string(size) + " bytes, range" + range.Describe() + " runs past its end");
  };
  switch (range.kind) {
    case ByteRange::Kind::kAll:
      if (size > range.max_size) {
        return DataLoss("object is " + std::to_string(size) + " bytes, more than the " +
                        std::to_string(range.max_size) + " its reader accepts (refused unread)");
      }
      return ResolvedRange{0, size};
    case ByteRange::Kind::kRange:
      // Written as a subtraction so offset + length cannot overflow.
      if (range.offset > size || range.length > size - range.offset) return past_end();
      return ResolvedRange{range.offset, range.offset + range.length};
    case ByteRange::Kind::kSuffix:
      // A suffix longer than the object means the object is shorter than its reader
      // expects (e.g. a shard without its full index): truncated, not "give me all".
      if (range.length > size) return past_end();
      return ResolvedRange{size - range.length, size};
    default:  // out-of-range values: the fallback below
      break;
  }
  return InvalidArgument("unknown byte range kind");
}

namespace {

Buffer CopyBytes(std::string_view bytes) {
  Result<Buffer> copy = Buffer::CopyOf(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
  if (!copy.ok()) throw std::bad_alloc();  // as std::string's copy would
  return std::move(copy).value();
}

}  // namespace

MemoryStore::Object MemoryStore::MakeObject(Buffer bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "crc32c:%08x:", static_cast<unsigned>(Crc32c(bytes.span())));
  std::string generation = text + std::to_string(bytes.size());
  return Object{std::move(bytes), std::move(generation)};
}

void MemoryStore::Set(std::string key, std::string bytes) {
  Object object = MakeObject(CopyBytes(bytes));
  std::lock_guard lock(mutex_);
  objects_.insert_or_assign(std::move(key), std::move(object));
}

void MemoryStore::Erase(const std::string& key) {
  std::lock_guard lock(mutex_);
  objects_.erase(key);
}

void MemoryStore::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
  // Build the result under the lock, run the callback outside it (it may call back in).
  auto read = [&]() -> Result<ReadResult> {
    // Same key rules as the file store, so tests on memory catch keys that disk rejects.
    INSITU_RETURN_IF_ERROR(ValidateKey(key));
    std::lock_guard lock(mutex_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return ReadResult::Missing();
    const Buffer& bytes = it->second.bytes;
    ReadResult result;
    result.found = true;
    result.generation = it->second.generation;
    if (!range.if_none_match.empty() && range.if_none_match == result.generation) {
      result.not_modified = true;
      return result;
    }
    auto resolved = ResolveRange(range, bytes.size());
    if (!resolved.ok()) {
      return resolved.status().WithContext("reading " + Describe(key) + range.Describe());
    }
    const uint64_t n = resolved->end - resolved->begin;
    INSITU_ASSIGN_OR_RETURN(Buffer data, Buffer::Allocate(n));
    if (n != 0) std::memcpy(data.data(), bytes.data() + resolved->begin, n);
    result.data = std::move(data);
    return result;
  };
  done(read());
}

Result<std::vector<std::string>> MemoryStore::List(std::string_view prefix) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> keys;
  for (auto it = objects_.lower_bound(prefix); it != objects_.end() && it->first.starts_with(prefix); ++it) {
    keys.push_back(it->first);
  }
  return keys;  // std::map order is sorted order
}

Result<DirListing> MemoryStore::ListDir(std::string_view dir) {
  INSITU_RETURN_IF_ERROR(ValidateDir(dir));
  const std::string prefix = dir.empty() ? "" : std::string(dir) + "/";
  std::lock_guard lock(mutex_);
  DirListing out;
  for (auto it = objects_.lower_bound(prefix); it != objects_.end() && it->first.starts_with(prefix);) {
    const size_t slash = it->first.find('/', prefix.size());
    if (slash == std::string::npos) {
      out.keys.push_back(it->first);
      ++it;
      continue;
    }
    // Keys under one subdirectory are adjacent in sorted order: skip past them ('0' follows
    // '/'). An empty name (keys "a//x") is no directory a key path can name.
    const std::string sub = it->first.substr(0, slash);
    if (slash > prefix.size()) out.dirs.push_back(sub);
    it = objects_.lower_bound(sub + "0");
  }
  // Keys come in key order ("a-b/x" before "a/x"): the directories, in their own.
  std::sort(out.dirs.begin(), out.dirs.end());
  return out;
}

Result<std::vector<ObjectGeneration>> MemoryStore::ListGenerations(std::string_view prefix) {
  std::lock_guard lock(mutex_);
  std::vector<ObjectGeneration> out;
  for (auto it = objects_.lower_bound(prefix); it != objects_.end() && it->first.starts_with(prefix); ++it) {
    out.push_back({it->first, it->second.generation});
  }
  return out;
}

Result<bool> MemoryStore::Write(std::string key, std::string_view value, WriteMode mode) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  // Copied before the lock: readers are not held up by a big write.
  INSITU_ASSIGN_OR_RETURN(Buffer bytes,
                          Buffer::CopyOf(std::span(reinterpret_cast<const std::byte*>(value.data()), value.size())));
  return WriteOwned(std::move(key), std::move(bytes), mode);
}

Result<bool> MemoryStore::WriteOwned(std::string key, Buffer value, WriteMode mode) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  // Kept as given unless most of its allocation is slack (a compressor's worst-case buffer
  // around a small output): a memory store should hold about what it stores.
  if (value.data() == nullptr || value.capacity() - value.size() > value.size() / 2) {
    value = CopyBytes(std::string_view(reinterpret_cast<const char*>(value.data()), value.size()));
  }
  Object object = MakeObject(std::move(value));  // the checksum, before the lock
  std::lock_guard lock(mutex_);
  if (mode == WriteMode::kIfAbsent) return objects_.try_emplace(std::move(key), std::move(object)).second;
  objects_.insert_or_assign(std::move(key), std::move(object));
  return true;
}

Status MemoryStore::Delete(std::string key) {
  INSITU_RETURN_IF_ERROR(CheckWritable(key));
  std::lock_guard lock(mutex_);
  objects_.erase(key);
  return Status::Ok();
}

Status MemoryStore::DeletePrefix(std::string prefix) {
  INSITU_ASSIGN_OR_RETURN(const std::string under, CheckWritablePrefix(prefix));
  std::lock_guard lock(mutex_);
  auto it = objects_.lower_bound(under);
  while (it != objects_.end() && it->first.starts_with(under)) it = objects_.erase(it);
  return Status::Ok();
}

std::string MemoryStore::Describe(std::string_view key) const { return "memory://" + std::string(key); }

}  // namespace insitubatch
