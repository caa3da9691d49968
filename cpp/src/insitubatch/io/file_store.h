#pragma once

// FileStore: a directory on local disk. Reads use pread on a small bounded IO pool, so a
// slow disk never blocks a decoder thread; the engine reads on its decode threads instead
// while the reads answer fast (ReadInline). Accepts a plain path or a file:// URL.

#include <sys/stat.h>

#include <memory>
#include <string>

#include "insitubatch/io/store.h"
#include "insitubatch/util/thread_pool.h"

namespace insitubatch {

class FileStore final : public Store {
 public:
  // `root` is a directory path or file:// URL. NotFound if it does not exist, unless
  // `writable`: then it is created (with its parents) when missing.
  // `io_threads` bounds concurrent preads (0 = a default of 8).
  static Result<std::shared_ptr<FileStore>> Open(const std::string& root, size_t io_threads = 0, bool writable = false);
  ~FileStore() override;

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  // One directory's entries, by List()'s rules: regular files (through symlinks too) but not
  // the store's write temporaries, and the directories it would walk into (not symlinked ones).
  Result<DirListing> ListDir(std::string_view dir) override;
  // The keys List() gives, each with a stat relative to its directory (what a read's
  // fstat sees).
  Result<std::vector<ObjectGeneration>> ListGenerations(std::string_view prefix) override;
  // A stat per key (no directory walk: a chunk per directory made the walk cost five
  // times the stats).
  Result<std::vector<std::string>> Generations(std::string_view prefix, const std::vector<std::string>& keys) override;
  std::string Describe(std::string_view key) const override;

  // Writes go to a fresh temporary file beside the object (util/owned_file.h), renamed over
  // it when complete, so a reader (or a process killed mid-write) never leaves or sees part
  // of an object. Directories are created as needed; the key rules are the reads', and a
  // key named like a temporary (IsWriteTempName) is refused, so every key written is listed.
  // DeletePrefix of a directory that is a symlink is refused (IoError naming it), as
  // zarr's LocalStore refuses: neither the old chunks nor the link are left to serve under
  // new metadata; links below it are removed, never followed.
  bool writable() const override { return writable_; }
  Result<bool> Write(std::string key, std::string_view value, WriteMode mode) override;
  Status Delete(std::string key) override;
  Status DeletePrefix(std::string prefix) override;

  // Blocking read on the calling thread (no pool hop).
  Result<ReadResult> ReadNow(const std::string& key, ByteRange range) const;
  // A pread of a file the page cache most often holds: the engine may read on its decoder.
  bool reads_inline() const override { return true; }
  Result<ReadResult> ReadInline(const std::string& key, ByteRange range) override;

  const std::string& root() const { return root_; }

 private:
  FileStore(std::string root, std::unique_ptr<ThreadPool> pool, bool writable);
  // Idle read buffers kept for reuse (stored chunks are read into them, then decoded).
  static constexpr size_t kMaxIdleReadBufferBytes = size_t{128} << 20;

  std::string root_;
  const bool writable_;
  std::unique_ptr<ThreadPool> pool_;
  std::shared_ptr<BufferRecycler> read_buffers_;
};

// A file's generation: "file:<size>:<mtime ns>:<ctime ns>:<inode>". A rewrite in place
// changes mtime and ctime (a tool that restores mtime still moves ctime), a rename over it
// the inode. Two writes of the same size within one timestamp tick (a few ms) of each other
// in the same inode are not told apart: the filesystem records nothing finer.
std::string FileGeneration(const struct stat& st);

// Whether a file name is one of FileStore's in-progress write temporaries (listings skip
// them; a writer killed mid-write leaves one behind, never a partial object).
bool IsWriteTempName(std::string_view file_name);

// Strips "file://" from a URL (percent-decoding not needed for local test paths); other
// schemes are InvalidArgument.
Result<std::string> LocalPathFromUrl(const std::string& url);

}  // namespace insitubatch
