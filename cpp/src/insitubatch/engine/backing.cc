#include "insitubatch/engine/backing.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <set>
#include <unordered_set>

#include "insitubatch/util/clock.h"
#include "insitubatch/util/crc32c.h"
#include "insitubatch/util/env.h"

namespace insitubatch::engine {
namespace {

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

bool AllOf(std::string_view text, bool (*ok)(char)) {
  return !text.empty() && std::all_of(text.begin(), text.end(), ok);
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLowerHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); }
bool IsSanitized(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || IsDigit(c) || c == '_' || c == '.' || c == '-';
}

std::string ChunkFileName(const std::string& path, std::string_view chunk) {
  return Sanitize(path) + "." + PathHash(path) + "." + std::string(chunk) + ".npy";
}

// The chunk file the backing would name for a log key "<path>#<chunk>" ("" for another key).
std::string ChunkFileNameOfKey(const std::string& key) {
  const size_t hash = key.rfind('#');
  if (hash == std::string::npos || !AllOf(std::string_view(key).substr(hash + 1), IsDigit)) return "";
  return ChunkFileName(key.substr(0, hash), std::string_view(key).substr(hash + 1));
}

// Whether `name` is one of the files the backing generates (and so may sweep).
bool IsOwnFileName(std::string_view name) { return name == cache::kLogName || DiskBacking::IsChunkFileName(name); }

// The outer chunk a log key "<path>#<chunk>" names (-1 for another key).
int64_t ChunkOfKey(const std::string& key) {
  const size_t hash = key.rfind('#');
  if (hash == std::string::npos) return -1;
  const std::string_view digits = std::string_view(key).substr(hash + 1);
  if (!AllOf(digits, IsDigit) || digits.size() > 18) return -1;
  return std::stoll(std::string(digits));
}

}  // namespace

Result<Revalidate> ParseRevalidate(std::string_view text) {
  if (text == "open") return Revalidate::kOpen;
  if (text == "first_use") return Revalidate::kFirstUse;
  if (text == "never") return Revalidate::kNever;
  return InvalidArgument("revalidate must be \"open\", \"first_use\" or \"never\", got '" + std::string(text) + "'");
}

std::string_view RevalidateName(Revalidate value) {
  switch (value) {
    case Revalidate::kFirstUse:
      return "first_use";
    case Revalidate::kNever:
      return "never";
    default:
      return "open";
  }
}

CachedArray CachedArrayOf(const ArraySource& source, std::string fingerprint) {
  CachedArray out{source.path(), std::move(fingerprint), source.resident, source.spc, source.array->store(), {}};
  auto shared = std::make_shared<const ArraySource>(source);
  out.stored_keys = [shared](int64_t chunk) {
    std::vector<std::string> keys;
    if (chunk < 0 || chunk >= shared->n_chunks()) return keys;  // a key no chunk has: nothing matches
    keys.reserve(shared->stored.tiles);
    for (uint64_t tile = 0; tile < shared->stored.tiles; ++tile) {
      keys.push_back(shared->array->ChunkKey(shared->PhysicalCoords(chunk, tile)));
    }
    return keys;
  };
  return out;
}

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

bool DiskBacking::IsChunkFileName(std::string_view name) {
  // "<sanitized path>.<8 hex>.<chunk>.npy", the form FileName() gives.
  if (!name.ends_with(".npy")) return false;
  std::string_view rest = name.substr(0, name.size() - 4);
  const size_t chunk_dot = rest.rfind('.');
  if (chunk_dot == std::string_view::npos || !AllOf(rest.substr(chunk_dot + 1), IsDigit)) return false;
  rest = rest.substr(0, chunk_dot);
  const size_t hash_dot = rest.rfind('.');
  if (hash_dot == std::string_view::npos) return false;
  const std::string_view hash = rest.substr(hash_dot + 1);
  const std::string_view sanitized = rest.substr(0, hash_dot);
  return hash.size() == 8 && AllOf(hash, IsLowerHex) && sanitized.size() <= 120 && AllOf(sanitized, IsSanitized);
}

Result<std::shared_ptr<DiskBacking>> DiskBacking::Open(DiskCacheOptions options, std::vector<CachedArray> arrays) {
  if (options.dir.empty()) return InvalidArgument("cache_dir is empty");
  while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();
  auto opened = cache::CacheDir::Open(options.dir, /*create=*/!options.read_only);
  if (!opened.ok()) {
    if (options.read_only && opened.status().code() == StatusCode::kNotFound) {
      // An argument error, as the Python API has always raised it: the one place it is said.
      return InvalidArgument("readonly_cache=True: the cache directory " + options.dir +
                             " does not exist (a reader never creates one; warm it with persist=True)");
    }
    return opened.status();
  }
  std::shared_ptr<const cache::CacheDir> dir = std::move(*opened);
  INSITU_ASSIGN_OR_RETURN(cache::DirLock lock,
                          options.read_only ? cache::DirLock::Reader(dir) : cache::DirLock::Writer(dir));
  if (!options.read_only) cache::SweepTempFiles(*dir, IsOwnFileName);
  std::optional<cache::CacheLog> log;
  if (options.persist || options.read_only) {
    INSITU_ASSIGN_OR_RETURN(cache::CacheLog opened_log, cache::CacheLog::Open(dir, !options.read_only));
    log.emplace(std::move(opened_log));
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
        if (!drop) {
          keep.push_back(e);
        } else if (e.file == ChunkFileNameOfKey(e.key)) {  // only a file the cache named: never a user's
          ::unlinkat(dir->fd(), e.file.c_str(), 0);
        }
      }
      INSITU_RETURN_IF_ERROR(log->Rewrite(std::move(keep)));
    }
    if (!options.read_only) {
      // A chunk file committed but never logged (killed in between) is not trusted. Only
      // this dataset's arrays' names are swept: never a file the cache did not name.
      std::unordered_set<std::string> logged, prefixes;
      for (const cache::LogEntry& e : log->entries()) logged.insert(e.file);
      for (const CachedArray& a : arrays) prefixes.insert(Sanitize(a.path) + "." + PathHash(a.path) + ".");
      cache::SweepFiles(*dir, [&](std::string_view name) {
        if (logged.count(std::string(name)) || !IsChunkFileName(name)) return false;
        const size_t chunk_dot = name.rfind('.', name.size() - 5);
        return prefixes.count(std::string(name.substr(0, chunk_dot + 1))) != 0;
      });
    }
  }
  std::shared_ptr<DiskBacking> backing(
      new DiskBacking(std::move(options), std::move(arrays), std::move(dir), std::move(lock), std::move(log)));
  backing->CheckSources();
  return backing;
}

void DiskBacking::CheckSources() {
  if (!log_) return;
  // The arrays' own entries, by array (a key names one array: "<path>#<chunk>").
  std::vector<std::vector<std::string>> keys(arrays_.size());
  for (const auto& [key, entry] : entries_) {
    const size_t hash = key.rfind('#');
    if (hash == std::string::npos) continue;
    for (size_t a = 0; a < arrays_.size(); ++a) {
      if (key.compare(0, hash, arrays_[a].path) == 0 && arrays_[a].path.size() == hash) keys[a].push_back(key);
    }
  }
  const Revalidate mode = options_.revalidate;
  for (size_t a = 0; a < arrays_.size(); ++a) {
    if (keys[a].empty()) continue;
    RevalidationReport report;
    report.path = arrays_[a].path;
    report.entries = keys[a].size();
    report.mode = mode;
    const auto t0 = std::chrono::steady_clock::now();
    // Entries that cannot be checked: written without generations by an older version
    // (read again once, unless "never"), or from a store that reports none (served).
    std::vector<std::string> checkable;
    for (const std::string& key : keys[a]) {
      const cache::LogEntry& e = entries_.at(key);
      if (!e.generations) {
        ++report.unverified;
        if (mode != Revalidate::kNever) unvalidated_.insert(key);  // Revive rejects it
      } else if (e.generations->empty()) {
        ++report.unversioned;
      } else {
        checkable.push_back(key);
      }
    }
    if (mode == Revalidate::kOpen && !checkable.empty()) {
      Status checked = CheckAgainstStore(arrays_[a], checkable, report);
      if (!checked.ok()) {
        report.mode = Revalidate::kFirstUse;
        report.fallback = checked.message();
      }
    }
    if (report.mode == Revalidate::kFirstUse) unvalidated_.insert(checkable.begin(), checkable.end());
    report.seconds = SecondsSince(t0);
    revalidation_.push_back(std::move(report));
  }
}

Status DiskBacking::CheckAgainstStore(const CachedArray& array, const std::vector<std::string>& keys,
                                      RevalidationReport& report) {
  if (array.store == nullptr || !array.stored_keys) return Unimplemented("no store to list");
  // Every entry's stored chunks, in order; their generations in one call.
  std::vector<std::string> stored;
  std::vector<size_t> first(keys.size() + 1, 0);
  for (size_t k = 0; k < keys.size(); ++k) {
    std::vector<std::string> tiles = array.stored_keys(ChunkOfKey(keys[k]));
    stored.insert(stored.end(), std::make_move_iterator(tiles.begin()), std::make_move_iterator(tiles.end()));
    first[k + 1] = stored.size();
  }
  const std::string prefix = array.path.empty() ? "" : array.path + "/";
  INSITU_ASSIGN_OR_RETURN(std::vector<std::string> now, array.store->Generations(prefix, stored));
  if (now.size() != stored.size()) return IoError("the store answered for other keys than asked");
  report.checked = stored.size();
  for (size_t k = 0; k < keys.size(); ++k) {
    const std::vector<std::string>& recorded = *entries_.at(keys[k]).generations;
    bool same = recorded.size() == first[k + 1] - first[k];
    for (size_t t = 0; same && t < recorded.size(); ++t) same = now[first[k] + t] == recorded[t];
    if (same) continue;
    ++report.changed;
    ++counters_.revive_source_changed;
    source_changed_.insert(keys[k]);
    entries_.erase(keys[k]);
  }
  return Status::Ok();
}

DiskBacking::DiskBacking(DiskCacheOptions options, std::vector<CachedArray> arrays,
                         std::shared_ptr<const cache::CacheDir> dir, cache::DirLock lock,
                         std::optional<cache::CacheLog> log)
    : options_(std::move(options)),
      arrays_(std::move(arrays)),
      dir_(std::move(dir)),
      lock_(std::move(lock)),
      log_(std::move(log)),
      fill_buffers_(BufferRecycler::Create(kMaxIdleFillBytes)) {
  for (uint32_t s = 0; s < arrays_.size(); ++s) headers_.push_back(Header(s));
  if (log_) {
    for (const cache::LogEntry& e : log_->entries()) entries_[e.key] = e;
  }
}

Result<std::shared_ptr<const cache::CacheDir>> DiskBacking::IntactDirectory() {
  if (dir_->Removed()) {
    INSITU_ASSIGN_OR_RETURN(auto dir, cache::CacheDir::Open(options_.dir, /*create=*/true));
    INSITU_ASSIGN_OR_RETURN(cache::DirLock lock, cache::DirLock::Writer(dir));
    std::optional<cache::CacheLog> log;
    if (log_) {
      INSITU_ASSIGN_OR_RETURN(cache::CacheLog opened, cache::CacheLog::Open(dir, /*writable=*/true));
      log.emplace(std::move(opened));
    }
    dir_ = std::move(dir);
    lock_.reset();
    lock_.emplace(std::move(lock));
    log_.reset();
    if (log) log_.emplace(std::move(*log));
    entries_.clear();  // their files went with the old directory
    unvalidated_.clear();
    if (log_) {
      for (const cache::LogEntry& e : log_->entries()) entries_[e.key] = e;
    }
    return dir_;
  }
  INSITU_RETURN_IF_ERROR(lock_->Reassert());
  if (log_) {
    const int fd = dir_->fd();
    INSITU_RETURN_IF_ERROR(log_->Reattach([fd](const cache::LogEntry& e) {
      struct stat st;
      return ::fstatat(fd, e.file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    }));
  }
  return dir_;
}

std::string DiskBacking::Describe() const {
  return options_.dir + (options_.read_only ? ", read-only" : options_.persist ? ", persist" : "");
}

std::string DiskBacking::LogKey(SlotKey key) const {
  return arrays_.at(key.source).path + "#" + std::to_string(key.chunk);
}

std::string DiskBacking::FileName(SlotKey key) const {
  return ChunkFileName(arrays_.at(key.source).path, std::to_string(key.chunk));
}

std::string DiskBacking::Header(uint32_t source) const {
  const CachedArray& a = arrays_[source];
  std::string shape = "(" + std::to_string(a.resident.tiles) + ", " + std::to_string(a.spc);
  for (uint64_t e : a.resident.tile_shape) shape += ", " + std::to_string(e);
  shape += ")";
  std::string dict =
      "{'descr': '" + a.resident.dtype.numpy_typestr() + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // magic (6) + version (2) + length (2), then the dict padded with spaces to end in '\n'.
  const size_t length = kSlotFileHeaderBytes - 10;
  dict.resize(length - 1, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  header += static_cast<char>(length & 0xff);
  header += static_cast<char>(length >> 8);
  return header + dict;
}

Result<Buffer> DiskBacking::WriteFile(SlotKey key, const Buffer& data, const TileGenerations& generations) {
  const std::string& header = headers_[key.source];
  std::shared_ptr<const cache::CacheDir> dir;
  {
    std::lock_guard lock(mutex_);
    INSITU_ASSIGN_OR_RETURN(dir, IntactDirectory());
  }
  INSITU_ASSIGN_OR_RETURN(cache::PendingFile file, cache::PendingFile::Create(std::move(dir), FileName(key)));
  INSITU_RETURN_IF_ERROR(file.Write(0, std::as_bytes(std::span(header.data(), header.size()))));
  // The checksum is of the bytes as they are written (from memory, not read back), so a
  // revival can tell whether the file still holds them. The body goes in one write(2): the
  // page cache keeps a large write in large folios, which a revival maps several times faster
  // than small ones (written a 256 KiB piece at a time, a revived epoch took 35 % longer).
  const std::optional<uint32_t> crc = options_.persist ? std::optional(Crc32c(data.span())) : std::nullopt;
  INSITU_RETURN_IF_ERROR(file.Write(header.size(), data.span()));
  if (options_.persist) INSITU_RETURN_IF_ERROR(file.Commit());
  INSITU_ASSIGN_OR_RETURN(auto mapping, file.Map(/*remove_with_mapping=*/!options_.persist));
  const uint64_t bytes = header.size() + data.size();
  std::lock_guard lock(mutex_);
  ++counters_.files_written;
  counters_.bytes_written += bytes;
  if (options_.persist) {  // logged only once the file is in place under its name
    // Each tile's generation; an empty list when any is unknown (nothing can check it).
    cache::LogEntry entry{
        LogKey(key), FileName(key), bytes, arrays_[key.source].fingerprint, crc, BootId(), std::vector<std::string>()};
    for (const std::optional<std::string>& g : generations) {
      if (!g) {
        entry.generations->clear();
        break;
      }
      entry.generations->push_back(*g);
    }
    INSITU_RETURN_IF_ERROR(log_->Append(entry));
    unvalidated_.erase(entry.key);  // read in this process: current
    source_changed_.erase(entry.key);
    entries_[entry.key] = std::move(entry);
  }
  return cache::FileMapping::Borrow(mapping, header.size(), data.size());
}

Status DiskBacking::ReadOnlyMiss(SlotKey key) const {
  const std::string chunk =
      "readonly_cache=True: chunk " + std::to_string(key.chunk) + " of array '" + arrays_.at(key.source).path + "'";
  bool changed;
  {
    std::lock_guard lock(mutex_);
    changed = source_changed_.count(LogKey(key)) != 0;
  }
  if (changed) {
    return NotFound(chunk + " changed at its source since the cache at " + options_.dir + " was written (revalidate='" +
                    std::string(RevalidateName(options_.revalidate)) +
                    "' found its stored chunks' generations changed). A read-only cache serves only what it "
                    "holds: warm it again with persist=True, or pass revalidate='never' to serve the cached "
                    "bytes as they are");
  }
  return NotFound(chunk + " is not in the cache at " + options_.dir +
                  " (or its file is unreadable or was made for another layout). A read-only "
                  "cache serves only what a persist=True run wrote: usually this split, "
                  "sample_range or transform set was never read into it");
}

Result<Buffer> DiskBacking::Allocate(SlotKey key, uint64_t bytes, bool resident) {
  if (options_.read_only) return ReadOnlyMiss(key);
  return fill_buffers_->Take(bytes);
}

Status DiskBacking::SourceChanged(SlotKey key) {
  {
    std::lock_guard lock(mutex_);
    const std::string log_key = LogKey(key);
    unvalidated_.erase(log_key);
    entries_.erase(log_key);
    source_changed_.insert(log_key);
    --counters_.revived;  // offered (Revive counted it), not served
    ++counters_.revive_source_changed;
  }
  return options_.read_only ? ReadOnlyMiss(key) : Status::Ok();
}

void DiskBacking::SourceUnchanged(SlotKey key) {
  std::lock_guard lock(mutex_);
  unvalidated_.erase(LogKey(key));
  ++counters_.revalidated;
}

std::optional<SlotBacking::Revival> DiskBacking::Revive(SlotKey key, uint64_t bytes, bool* rejected,
                                                        bool* source_changed) {
  cache::LogEntry entry;
  std::shared_ptr<const cache::CacheDir> dir;
  bool unvalidated;
  {
    // Under the lock: a writer whose directory was removed replaces log_ (IntactDirectory).
    std::lock_guard lock(mutex_);
    if (!log_) return std::nullopt;
    const std::string log_key = LogKey(key);
    auto it = entries_.find(log_key);
    if (it == entries_.end()) {
      // Dropped at open because its source changed: a rejected entry, read again.
      *rejected = *source_changed = source_changed_.count(log_key) != 0;
      return std::nullopt;
    }
    entry = it->second;
    dir = dir_;
    unvalidated = unvalidated_.count(log_key) != 0;
    if (unvalidated && !entry.generations) {  // an older version's entry: nothing to check it by
      ++counters_.revive_unverified;
      unvalidated_.erase(log_key);
      entries_.erase(it);
      *rejected = true;
      return std::nullopt;
    }
  }
  const std::string& header = headers_[key.source];
  // Only the file the cache names for this chunk, never one a tampered log points at.
  auto mapping = entry.file == FileName(key)
                     ? cache::MapReadOnly(*dir, entry.file)
                     : Result<std::shared_ptr<cache::FileMapping>>(NotFound(entry.file + " is not this chunk's file"));
  const bool fits = mapping.ok() && (*mapping)->size() == header.size() + bytes &&
                    std::memcmp((*mapping)->data(), header.data(), header.size()) == 0;
  std::lock_guard lock(mutex_);
  // An entry without a checksum (an older version's) cannot be vouched for.
  if (!fits || !entry.crc32c) {
    // A miss, never an error: the chunk is read again and its entry replaced.
    ++(!mapping.ok() ? counters_.revive_missing : !fits ? counters_.revive_mismatch : counters_.revive_corrupt);
    entries_.erase(entry.key);
    unvalidated_.erase(entry.key);
    *rejected = true;
    return std::nullopt;
  }
  ++counters_.revived;
  // Written in this boot: no crash or power loss since, so its bytes are what was written.
  const bool this_boot = !entry.boot.empty() && entry.boot == BootId();
  Revival revival{
      cache::FileMapping::Borrow(*mapping, header.size(), bytes), this_boot ? std::nullopt : entry.crc32c, {}};
  if (unvalidated) revival.revalidate = *entry.generations;  // served once the engine's reads tell
  return revival;
}

void DiskBacking::Reject(SlotKey key) {
  std::lock_guard lock(mutex_);
  --counters_.revived;
  ++counters_.revive_corrupt;
  entries_.erase(LogKey(key));
  unvalidated_.erase(LogKey(key));
}

Result<Buffer> DiskBacking::Complete(SlotKey key, Buffer data, const TileGenerations& generations) {
  return WriteFile(key, data, generations);  // `data` goes back to the recycler when it is dropped
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
