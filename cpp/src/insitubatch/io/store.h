#pragma once

// Folder io/: bytes by key -- the Store interface and its backends (file, memory, and by
// subfolder HTTP, S3, GCS, Azure, kerchunk references), retries, credentials.
//
// Store: the key -> bytes interface every backend implements (file, memory, HTTP, S3, ...).
// A missing key is a value (ReadResult::found == false), not an error: zarr reads it as
// fill value. Reads are asynchronous; Read() is the blocking convenience over ReadAsync().

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "insitubatch/util/buffer.h"
#include "insitubatch/util/cancel.h"
#include "insitubatch/util/result.h"

namespace insitubatch {

// Which bytes of an object to read.
struct ByteRange {
  enum class Kind { kAll, kRange, kSuffix };
  Kind kind = Kind::kAll;
  uint64_t offset = 0;  // kRange: first byte
  uint64_t length = 0;  // kRange: byte count; kSuffix: the last `length` bytes
  // kAll: the largest object the reader accepts (a zarr chunk: the largest valid encoding
  // of it). A store that learns the size first (file, memory, references) refuses a larger
  // object with DataLoss before reading or allocating anything.
  uint64_t max_size = UINT64_MAX;
  // A conditional read (the disk cache revalidating a chunk at first use): the object's
  // generation as an earlier read saw it (ReadResult::generation). A store that can tell
  // the object still has it answers not_modified without its bytes (HTTP If-None-Match, a
  // 304; a file's fstat); one that cannot reads as usual. "" = an ordinary read.
  std::string if_none_match;

  static ByteRange All() { return {}; }
  static ByteRange AllAtMost(uint64_t max_size) { return {Kind::kAll, 0, 0, max_size, {}}; }
  static ByteRange Range(uint64_t offset, uint64_t length) { return {Kind::kRange, offset, length, UINT64_MAX, {}}; }
  static ByteRange Suffix(uint64_t length) { return {Kind::kSuffix, 0, length, UINT64_MAX, {}}; }

  // "" for kAll, " [bytes 10-19]" or " [last 16 bytes]" otherwise; used in error context.
  std::string Describe() const;
};

// What it took to get a read's bytes: attempts beyond the first, the time spent waiting
// between them, and the last transient error that caused one (for ds.last_pass).
struct RetryRecord {
  uint32_t retries = 0;
  double backoff_s = 0;
  std::string last_error;
};

struct ReadResult {
  bool found = false;
  Buffer data;  // the requested bytes; empty when !found or not_modified
  RetryRecord retry;
  // The object's version as the store saw it, "" when the store cannot tell (or !found):
  // an ETag (HTTP, S3, Azure), "x-goog-generation:<n>" (GCS), size, mtime, ctime and inode
  // (file), a checksum of the bytes (memory). Opaque: only compared for equality with what
  // ListGenerations or a later read reports for the same key.
  std::string generation;
  // A conditional read (ByteRange::if_none_match) found the object unchanged: found, no
  // bytes, `generation` the one asked about.
  bool not_modified = false;

  static ReadResult Missing() { return {}; }
};

using ReadCallback = std::function<void(Result<ReadResult>)>;

// One object of a listing with its generation (ReadResult::generation's form).
struct ObjectGeneration {
  std::string key;
  std::string generation;
  friend bool operator==(const ObjectGeneration&, const ObjectGeneration&) = default;
};

// One level of a store's keys (Store::ListDir): what lies directly in a directory.
struct DirListing {
  std::vector<std::string> keys;  // the objects directly in it, as full keys, sorted
  std::vector<std::string> dirs;  // its subdirectories, as full paths without a trailing '/', sorted
                                  // (none of an empty name: keys "a//x" are in no directory a path names)
};

class Store {
 public:
  virtual ~Store() = default;

  // Starts a read; `done` runs exactly once, on an IO thread or inline. A range that
  // extends past the end of the object is an error (DataLoss: the object is truncated).
  // Once `cancel` is raised the read ends soon with Cancelled (whatever it was waiting on:
  // a queue, a backoff, a stalled server), unless its bytes were already in hand.
  virtual void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) = 0;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done) {
    ReadAsync(std::move(key), range, std::move(done), nullptr);
  }

  // A store whose reads are quick calls on local data (files in the page cache) may be read
  // on the calling thread: the engine then reads a chunk on the decode thread about to
  // decode it, without a hop through an IO thread, while the reads keep answering fast.
  virtual bool reads_inline() const { return false; }
  // A store whose reads cross a network (HTTP, S3, GCS, Azure): each read costs at least a
  // round trip, so the engine asks for the first batch's reads at once instead of first
  // learning, a few reads at a time, how fast the store answers.
  virtual bool remote() const { return false; }
  // Opens up to `connections` connections to a remote store's server in the background,
  // each by a one-byte read of `key` whose answer is dropped, while the caller waits on the
  // read that needs an answer. Where a connection costs round trips of its own, the first
  // batch's reads then go out on open connections. A local store does nothing.
  // InvalidArgument for a bad key or more than kMaxWarmConnections.
  virtual Status WarmConnections(const std::string& key, size_t connections);
  static constexpr size_t kMaxWarmConnections = 1024;
  // The read on the calling thread; called only where reads_inline().
  virtual Result<ReadResult> ReadInline(const std::string& key, ByteRange range);

  // The plan's coming reads, told before they are asked for (one block at a time). A store
  // that can serve neighbours with one request -- the reference store, for adjacent byte
  // ranges of one file -- says so with wants_expected_reads() and fetches a run at once.
  virtual bool wants_expected_reads() const { return false; }
  virtual void ExpectReads(const std::vector<std::string>& keys) {}

  // Every key under `prefix` ("" = all), sorted. Keys are relative to the store root.
  virtual Result<std::vector<std::string>> List(std::string_view prefix) = 0;
  // One level below `dir` ("" = the root, else "a/b"; InvalidArgument past ValidateDir): its objects and its
  // subdirectories, without what lies deeper. A hierarchy without consolidated metadata is walked this way, a group at
  // a time, instead of listing every chunk key (a page per 1000 on S3). Unimplemented (the default) where a store can
  // only list a whole prefix: the caller lists with List() instead.
  virtual Result<DirListing> ListDir(std::string_view dir);

  // Every object under `prefix` with its generation, as List() orders them: what the disk
  // cache revalidates its chunks against in one listing (a page per 1000 objects on S3)
  // instead of a request per chunk. A generation must equal what a read of the same,
  // unchanged object reports. Unimplemented where the store cannot (the default: plain
  // HTTP, references, a Python store).
  virtual Result<std::vector<ObjectGeneration>> ListGenerations(std::string_view prefix);
  // The generations of `keys` (each under `prefix`), "" for one absent: what the disk cache
  // checks its entries against when it opens. By default one ListGenerations of `prefix`;
  // a store that answers for known keys more cheaply than it walks a prefix (a file store:
  // a stat each, where a listing opens every directory) does so.
  virtual Result<std::vector<std::string>> Generations(std::string_view prefix, const std::vector<std::string>& keys);

  // A human-readable location for `key` (a path or URL) used in error messages.
  virtual std::string Describe(std::string_view key) const = 0;

  // Writes, for a store opened writable (zarr-python and xarray write through it). They
  // block the calling thread and are safe from any thread. A reader never sees part of an
  // object: each write replaces the whole object at once. A store that cannot write --
  // opened read-only, or a protocol with no write verb -- refuses with FailedPrecondition
  // naming itself and why (WriteRefusal).
  virtual bool writable() const { return false; }
  // kOverwrite replaces any object at `key` and returns true. kIfAbsent writes only when no
  // object is there, atomically against every other writer (a conditional create), and
  // returns whether it wrote.
  enum class WriteMode { kOverwrite, kIfAbsent };
  virtual Result<bool> Write(std::string key, std::string_view value, WriteMode mode);
  // Write of bytes the caller gives up (an encoded chunk): a store that keeps objects in
  // memory takes the buffer as it is instead of copying it; the others write its bytes.
  virtual Result<bool> WriteOwned(std::string key, Buffer value, WriteMode mode);
  // Removes the object at `key`; a missing key is not an error.
  virtual Status Delete(std::string key);
  // Removes every object whose key starts with `prefix` + "/" (zarr's delete_dir); ""
  // removes every object in the store.
  virtual Status DeletePrefix(std::string prefix);

  // Blocking read.
  Result<ReadResult> Read(std::string key, ByteRange range = ByteRange::All());

 protected:
  // Why this store refuses writes, completing "cannot write <where>: ..." (the default:
  // it was opened read-only).
  virtual std::string WriteRefusal() const;
  // Checks a write to `key` is allowed here and the key is valid.
  Status CheckWritable(std::string_view key) const;
  // The same for a DeletePrefix: the validated "prefix/" ("" for the whole store).
  Result<std::string> CheckWritablePrefix(std::string_view prefix) const;
};

// URL schemes as written -> the scheme of the store that serves each ("" is a plain path):
// the one table of aliases (s3a, gcs, azure, abfs, ...), which Python's urls.SCHEMES reads.
const std::vector<std::pair<std::string_view, std::string_view>>& StoreSchemes();
// The store scheme serving `scheme` (any case), or "" when none does.
std::string_view StoreSchemeOf(std::string_view scheme);

// Rejects keys that could escape the store root ("..", absolute, empty segments, NUL).
Status ValidateKey(std::string_view key);
// A directory for Store::ListDir: "" (the root) or a valid key without a trailing '/'.
Status ValidateDir(std::string_view dir);

// Whether the object at `key` is exactly `value`: a conditional create refused after a
// retry asks it, since its own first attempt may have landed with the reply lost.
Result<bool> HoldsExactly(Store& store, const std::string& key, std::string_view value);

}  // namespace insitubatch
