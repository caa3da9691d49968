#include "insitubatch/cache/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <system_error>

#include "insitubatch/cache/files.h"

namespace insitubatch::cache {
namespace {

constexpr uint64_t kMaxLogBytes = uint64_t{1} << 30;  // ~10 million entries
constexpr size_t kMaxFieldBytes = 4096;

Status Corrupt(std::string_view where, size_t line, const std::string& why) {
  return InvalidArgument("cache log " + std::string(where) + " line " + std::to_string(line) + ": " + why +
                         ". The cache directory is corrupt or was tampered with: delete it "
                         "(reset_stale_cache does not repair corruption)");
}

Result<LogEntry> ParseEntry(std::string_view line, std::string_view where, size_t number) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Corrupt(where, number, "not a JSON object");
  auto string_field = [&](const char* name, std::string* out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string()) {
      return Corrupt(where, number, std::string("\"") + name + "\" is missing or not a string");
    }
    *out = it->get<std::string>();
    if (out->size() > kMaxFieldBytes) return Corrupt(where, number, std::string("\"") + name + "\" is too long");
    return Status::Ok();
  };
  LogEntry entry;
  INSITU_RETURN_IF_ERROR(string_field("key", &entry.key));
  INSITU_RETURN_IF_ERROR(string_field("file", &entry.file));
  INSITU_RETURN_IF_ERROR(string_field("tag", &entry.tag));
  auto bytes = j.find("bytes");
  if (bytes == j.end() || !bytes->is_number_unsigned()) {
    return Corrupt(where, number, "\"bytes\" is missing or not a non-negative integer");
  }
  entry.bytes = bytes->get<uint64_t>();
  if (auto crc = j.find("crc32c"); crc != j.end()) {
    if (!crc->is_number_unsigned() || crc->get<uint64_t>() > 0xFFFFFFFFu) {
      return Corrupt(where, number, "\"crc32c\" is not a 32-bit unsigned integer");
    }
    entry.crc32c = crc->get<uint32_t>();
  }
  if (auto boot = j.find("boot"); boot != j.end()) {
    if (!boot->is_string() || boot->get<std::string>().size() > 64) {
      return Corrupt(where, number, "\"boot\" is not a boot id");
    }
    entry.boot = boot->get<std::string>();
  }
  if (auto generations = j.find("generations"); generations != j.end()) {
    if (!generations->is_array()) return Corrupt(where, number, "\"generations\" is not a list");
    entry.generations.emplace();
    entry.generations->reserve(generations->size());
    for (const nlohmann::json& g : *generations) {
      if (!g.is_string() || g.get_ref<const std::string&>().size() > kMaxFieldBytes) {
        return Corrupt(where, number,
                       "\"generations\" holds an item that is not a string of at most " +
                           std::to_string(kMaxFieldBytes) + " bytes");
      }
      entry.generations->push_back(g.get<std::string>());
    }
  }
  if (Status name = CheckBasename(entry.file, "cache log " + std::string(where)); !name.ok()) {
    return Corrupt(where, number, name.message());
  }
  return entry;
}

}  // namespace

std::string LogHeader() {
  return nlohmann::json{{"format", "insitubatch-cache"}, {"format_version", kLogFormatVersion}}.dump() + "\n";
}

std::string LogLine(const LogEntry& e) {
  nlohmann::json j{{"key", e.key}, {"file", e.file}, {"bytes", e.bytes}, {"tag", e.tag}};
  if (e.crc32c) j["crc32c"] = *e.crc32c;
  if (!e.boot.empty()) j["boot"] = e.boot;
  if (e.generations) j["generations"] = *e.generations;
  return j.dump() + "\n";
}

Result<LogContents> ParseLog(std::string_view text, std::string_view where) {
  LogContents out;
  size_t start = 0;
  size_t number = 0;
  bool header_seen = false;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    ++number;
    if (end == std::string_view::npos) {  // no newline: a line cut short by a crash
      out.torn_tail = true;
      break;
    }
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (!header_seen) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || j.value("format", "") != "insitubatch-cache") {
        return Corrupt(where, number, "the header is unreadable");
      }
      auto version = j.find("format_version");
      if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != kLogFormatVersion) {
        return Corrupt(where, number, "format_version is not " + std::to_string(kLogFormatVersion));
      }
      header_seen = true;
      continue;
    }
    INSITU_ASSIGN_OR_RETURN(LogEntry entry, ParseEntry(line, where, number));
    out.entries.push_back(std::move(entry));
  }
  if (!header_seen && !text.empty() && !out.torn_tail) {
    return Corrupt(where, 1, "the header is unreadable");
  }
  return out;
}

Result<CacheLog> CacheLog::Open(const std::string& dir, bool writable) {
  INSITU_ASSIGN_OR_RETURN(auto opened, CacheDir::Open(dir, /*create=*/false));
  return Open(std::move(opened), writable);
}

Result<CacheLog> CacheLog::Open(std::shared_ptr<const CacheDir> dir, bool writable) {
  const std::string path = dir->PathOf(kLogName);
  std::vector<LogEntry> entries;
  bool torn = false;
  auto text = ReadSmallFile(*dir, kLogName, kMaxLogBytes);
  if (text.ok()) {
    INSITU_ASSIGN_OR_RETURN(LogContents contents, ParseLog(*text, path));
    entries = std::move(contents.entries);
    torn = contents.torn_tail;
  } else if (text.status().code() != StatusCode::kNotFound) {
    return text.status();
  }
  CacheLog log(std::move(dir), std::move(entries), torn, writable);
  log.file_ = log.NamedFile();
  // Appending after a torn line would glue the next entry onto it: drop the tail first.
  if (writable && torn) INSITU_RETURN_IF_ERROR(log.Rewrite(log.entries_));
  // A log there is opened for appending now, so a file the cache may not write through (a
  // hard link) is refused at open rather than at the first entry, mid-pass.
  if (writable && text.ok()) INSITU_RETURN_IF_ERROR(log.EnsureOpen());
  return log;
}

std::optional<std::pair<dev_t, ino_t>> CacheLog::NamedFile() const {
  struct stat st;
  if (::fstatat(dir_->fd(), kLogName, &st, AT_SYMLINK_NOFOLLOW) != 0) return std::nullopt;
  return std::pair{st.st_dev, st.st_ino};
}

CacheLog::CacheLog(CacheLog&& other) noexcept
    : dir_(other.dir_),
      path_(std::move(other.path_)),
      entries_(std::move(other.entries_)),
      torn_tail_(other.torn_tail_),
      writable_(other.writable_),
      fd_(std::exchange(other.fd_, -1)),
      file_(other.file_) {}

CacheLog::~CacheLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status CacheLog::EnsureOpen() {
  if (fd_ >= 0) return Status::Ok();
  if (!writable_) return FailedPrecondition("the cache log " + path_ + " is read-only here");
  auto fd = OpenRegularFile(*dir_, kLogName, O_WRONLY | O_APPEND | O_CREAT);
  if (!fd.ok()) return fd.status().WithContext("the cache log");
  fd_ = *fd;
  struct stat st;
  if (::fstat(fd_, &st) == 0) file_ = std::pair{st.st_dev, st.st_ino};
  // A new (empty) log starts with its header.
  if (::lseek(fd_, 0, SEEK_END) == 0) {
    const std::string header = LogHeader();
    if (::write(fd_, header.data(), header.size()) != static_cast<ssize_t>(header.size())) {
      const int err = errno;
      return ErrnoError("cannot write the cache log " + path_, err, kCacheDiskFull);
    }
  }
  return Status::Ok();
}

Status CacheLog::Append(const LogEntry& entry) {
  INSITU_RETURN_IF_ERROR(EnsureOpen());
  const std::string line = LogLine(entry);
  // One write per line: with O_APPEND the line lands whole at the end (or, if the process
  // dies inside it, as the torn tail the next open drops).
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size())) {
    const int err = n < 0 ? errno : ENOSPC;
    // A line written in part is a torn tail; nothing may follow it (it would then be a
    // malformed interior line), so this log takes no more appends. Reopening drops it.
    writable_ = false;
    ::close(fd_);
    fd_ = -1;
    return ErrnoError("cannot append to the cache log " + path_, err, kCacheDiskFull);
  }
  entries_.push_back(entry);
  return Status::Ok();
}

Status CacheLog::Rewrite(std::vector<LogEntry> keep) {
  if (!writable_) return FailedPrecondition("the cache log " + path_ + " is read-only here");
  std::string text = LogHeader();
  for (const LogEntry& e : keep) text += LogLine(e);
  INSITU_RETURN_IF_ERROR(WriteFileAtomically(dir_, kLogName, text));
  file_ = NamedFile();
  if (fd_ >= 0) {  // the old descriptor points at the replaced file
    ::close(fd_);
    fd_ = -1;
  }
  entries_ = std::move(keep);
  torn_tail_ = false;
  return Status::Ok();
}

Status CacheLog::Reattach(const std::function<bool(const LogEntry&)>& still_there) {
  if (!writable_) return Status::Ok();
  const auto named = NamedFile();
  if (named == file_) return Status::Ok();
  std::vector<LogEntry> keep;
  for (const LogEntry& e : entries_) {
    if (still_there(e)) keep.push_back(e);
  }
  return Rewrite(std::move(keep));
}

}  // namespace insitubatch::cache
