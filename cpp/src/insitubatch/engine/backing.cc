#include "insitubatch/engine/backing.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <set>
#include <unordered_set>

namespace insitubatch::engine {
namespace {

constexpr size_t kHeaderBytes = 4096;  // the data starts on a page: map it as it lies

std::string Sanitize(const std::string& path) {
  std::string out;
  for (char c : path) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    out += ok ? c : '_';
  }
  return out.substr(0, 120);
}

// FNV-1a: a short, stable tag telling apart paths that sanitize alike ("a/b" vs "a_b").
std::string PathHash(const std::string& path) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : path) h = (h ^ c) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return std::string(text, 8);
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

std::vector<std::string> StaleArrays(const std::vector<cache::LogEntry>& entries,
                                     const std::vector<CachedArray>& arrays) {
  std::set<std::string> stale;
  for (const CachedArray& a : arrays) {
    const std::string prefix = a.path + "#";
    for (const cache::LogEntry& e : entries) {
      if (e.key.starts_with(prefix) && e.tag != a.fingerprint) {
        stale.insert(a.path);
        break;
      }
    }
  }
  return {stale.begin(), stale.end()};
}

Result<std::shared_ptr<DiskBacking>> DiskBacking::Open(DiskCacheOptions options, std::vector<CachedArray> arrays) {
  if (options.dir.empty()) return InvalidArgument("cache_dir is empty");
  while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();
  struct stat st;
  if (::stat(options.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (options.read_only) {
      return NotFound("readonly_cache=True: the cache directory " + options.dir +
                      " does not exist (a reader never creates one; warm it with persist=True)");
    }
    if (::mkdir(options.dir.c_str(), 0755) != 0 && errno != EEXIST) {
      const int err = errno;
      return IoError("cannot create the cache directory " + options.dir + ": " + std::strerror(err)).set_detail(err);
    }
  }
  INSITU_ASSIGN_OR_RETURN(cache::DirLock lock, options.read_only ? cache::DirLock::Reader(options.dir)
                                                                 : cache::DirLock::Writer(options.dir));
  if (!options.read_only) cache::SweepTempFiles(options.dir);
  std::optional<cache::CacheLog> log;
  if (options.persist || options.read_only) {
    INSITU_ASSIGN_OR_RETURN(cache::CacheLog opened, cache::CacheLog::Open(options.dir, !options.read_only));
    log.emplace(std::move(opened));
    const std::vector<std::string> stale = StaleArrays(log->entries(), arrays);
    if (!stale.empty()) {
      std::string names;
      for (const std::string& s : stale) names += (names.empty() ? "'" : ", '") + s + "'";
      if (!options.reset_stale || options.read_only) {
        return InvalidArgument("persist: the cache at " + options.dir + " is stale for " + names +
                               " (the chunk transforms scoped to them changed since their entries were written). "
                               "This is not corruption: pass reset_stale_cache=True to rebuild just those arrays");
      }
      INSITU_RETURN_IF_ERROR(lock.ExcludeReaders());
      std::vector<cache::LogEntry> keep;
      for (const cache::LogEntry& e : log->entries()) {
        const bool drop = std::any_of(arrays.begin(), arrays.end(), [&](const CachedArray& a) {
          return e.key.starts_with(a.path + "#") && e.tag != a.fingerprint;
        });
        if (drop) {
          ::unlink(Join(options.dir, e.file).c_str());
        } else {
          keep.push_back(e);
        }
      }
      INSITU_RETURN_IF_ERROR(log->Rewrite(std::move(keep)));
    }
    if (!options.read_only) {  // a file committed but never logged (killed in between) is not trusted
      std::unordered_set<std::string> logged;
      for (const cache::LogEntry& e : log->entries()) logged.insert(e.file);
      cache::SweepUnlisted(options.dir, ".npy", logged);
    }
  }
  return std::shared_ptr<DiskBacking>(
      new DiskBacking(std::move(options), std::move(arrays), std::move(lock), std::move(log)));
}

DiskBacking::DiskBacking(DiskCacheOptions options, std::vector<CachedArray> arrays, cache::DirLock lock,
                         std::optional<cache::CacheLog> log)
    : options_(std::move(options)),
      arrays_(std::move(arrays)),
      lock_(std::move(lock)),
      log_(std::move(log)),
      fill_buffers_(BufferRecycler::Create(kMaxIdleFillBytes)) {
  for (uint32_t s = 0; s < arrays_.size(); ++s) headers_.push_back(Header(s));
  if (log_) {
    for (const cache::LogEntry& e : log_->entries()) entries_[e.key] = e;
  }
}

std::string DiskBacking::Describe() const {
  return options_.dir + (options_.read_only ? ", read-only" : options_.persist ? ", persist" : "");
}

std::string DiskBacking::LogKey(SlotKey key) const {
  return arrays_.at(key.source).path + "#" + std::to_string(key.chunk);
}

std::string DiskBacking::FileName(SlotKey key) const {
  const std::string& path = arrays_.at(key.source).path;
  return Sanitize(path) + "." + PathHash(path) + "." + std::to_string(key.chunk) + ".npy";
}

std::string DiskBacking::Header(uint32_t source) const {
  const CachedArray& a = arrays_[source];
  std::string shape = "(" + std::to_string(a.resident.tiles) + ", " + std::to_string(a.spc);
  for (uint64_t e : a.resident.tile_shape) shape += ", " + std::to_string(e);
  shape += ")";
  std::string dict =
      "{'descr': '" + a.resident.dtype.numpy_typestr() + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // magic (6) + version (2) + length (2), then the dict padded with spaces to end in '\n'.
  const size_t length = kHeaderBytes - 10;
  dict.resize(length - 1, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  header += static_cast<char>(length & 0xff);
  header += static_cast<char>(length >> 8);
  return header + dict;
}

Result<Buffer> DiskBacking::WriteFile(SlotKey key, const Buffer& data) {
  const std::string& header = headers_[key.source];
  INSITU_ASSIGN_OR_RETURN(cache::PendingFile file, cache::PendingFile::Create(options_.dir, FileName(key)));
  INSITU_RETURN_IF_ERROR(file.Write(0, std::as_bytes(std::span(header.data(), header.size()))));
  INSITU_RETURN_IF_ERROR(file.Write(header.size(), data.span()));
  if (options_.persist) INSITU_RETURN_IF_ERROR(file.Commit());
  INSITU_ASSIGN_OR_RETURN(auto mapping, file.Map(/*remove_with_mapping=*/!options_.persist));
  const uint64_t bytes = header.size() + data.size();
  std::lock_guard lock(mutex_);
  ++counters_.files_written;
  counters_.bytes_written += bytes;
  if (options_.persist) {  // logged only once the file is in place under its name
    cache::LogEntry entry{LogKey(key), FileName(key), bytes, arrays_[key.source].fingerprint};
    INSITU_RETURN_IF_ERROR(log_->Append(entry));
    entries_[entry.key] = std::move(entry);
  }
  return cache::FileMapping::Borrow(mapping, header.size(), data.size());
}

Result<Buffer> DiskBacking::Allocate(SlotKey key, uint64_t bytes, bool resident) {
  if (options_.read_only) {
    return NotFound("readonly_cache=True: chunk " + std::to_string(key.chunk) + " of array '" +
                    arrays_.at(key.source).path + "' is not in the cache at " + options_.dir +
                    " (or its file is unreadable or was made for another layout). A read-only "
                    "cache serves only what a persist=True run wrote: usually this split, "
                    "sample_range or transform set was never read into it");
  }
  return fill_buffers_->Take(bytes);
}

std::optional<Buffer> DiskBacking::Revive(SlotKey key, uint64_t bytes) {
  if (!log_) return std::nullopt;
  cache::LogEntry entry;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(LogKey(key));
    if (it == entries_.end()) return std::nullopt;
    entry = it->second;
  }
  const std::string& header = headers_[key.source];
  auto mapping = cache::MapReadOnly(Join(options_.dir, entry.file));
  const bool fits = mapping.ok() && (*mapping)->size() == header.size() + bytes &&
                    std::memcmp((*mapping)->data(), header.data(), header.size()) == 0;
  std::lock_guard lock(mutex_);
  if (!fits) {
    // A miss, never an error: the chunk is read again and its entry replaced.
    ++(mapping.ok() ? counters_.revive_mismatch : counters_.revive_missing);
    entries_.erase(entry.key);
    return std::nullopt;
  }
  ++counters_.revived;
  return cache::FileMapping::Borrow(*mapping, header.size(), bytes);
}

Result<Buffer> DiskBacking::Complete(SlotKey key, Buffer data) {
  return WriteFile(key, data);  // `data` goes back to the recycler when it is dropped
}

DiskCacheCounters DiskBacking::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

uint64_t DiskBacking::logged_entries() const {
  std::lock_guard lock(mutex_);
  uint64_t n = 0;
  for (const auto& [key, e] : entries_) {
    for (const CachedArray& a : arrays_) n += key.starts_with(a.path + "#") ? 1 : 0;
  }
  return n;
}

uint64_t DiskBacking::logged_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t n = 0;
  for (const auto& [key, e] : entries_) {
    for (const CachedArray& a : arrays_) n += key.starts_with(a.path + "#") ? e.bytes : 0;
  }
  return n;
}

}  // namespace insitubatch::engine
