#pragma once

// The locked write: a file that several processes may want at once and one writes (what
// planfetch's object cache does per object). The writer creates, or opens where a killed
// writer left it, the temp file "<name>.insitu-dl" beside the final name, holds an
// exclusive flock on it while it writes, and renames it into place (a PendingFile: no
// partial file is ever visible under the final name). Another process finds the lock held
// and waits for the final name, or for the lock to go (the writer finished, failed or died:
// the kernel drops a dead process's lock). The temp name is fixed because it is the lock:
// a lock on an inode no longer at that name is no lock, so the writer checks it still is.
//
// flock locks belong to the open file description, which fork() shares: a child's copy of
// a lock descriptor would keep its parent's lock alive after the parent died. So every lock
// descriptor opened here is closed in a forked child at once (pthread_atfork), and opening
// and closing them is serialised with fork(): the parent's locks stay the parent's.
// Like every file of the disk tier, the temp file is opened through the held directory
// without following links and without blocking, and must be a regular file.

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "insitubatch/cache/files.h"
#include "insitubatch/util/result.h"

namespace insitubatch::cache {

// The suffix of a locked write's temp file; a name the owner generates never ends with it.
inline constexpr std::string_view kLockedTempSuffix = ".insitu-dl";

struct LockedWrite {
  enum class State {
    kLocked,         // this process holds the lock: `file` is the (empty) temp file
    kHeldElsewhere,  // another process holds it (wait with Free)
    kPresent,        // the final file is there already
  };
  State state = State::kHeldElsewhere;
  // kLocked: Write, then Commit to rename it into place; destroying it releases the lock
  // (removing the temp file first, unless committed).
  std::optional<PendingFile> file;

  // Takes the lock for the file `name` of `dir` (a bare name its owner generated). A
  // symlink, FIFO or other non-regular file at either name is refused as OpenRegularFile
  // refuses; FailedPrecondition where the filesystem has no advisory locks.
  static Result<LockedWrite> Begin(std::shared_ptr<const CacheDir> dir, const std::string& name);

  // Whether the lock for `name` is free: no temp file, or nobody holds its lock. With
  // `check_holder`, a lock whose holders have all exited (per /proc/locks) counts as free:
  // it lives on only in a descriptor some child inherited without the fork handler running,
  // and nobody will ever release it; the temp's name is unlinked (its inode stays locked,
  // unnamed) so the next Begin starts on a fresh inode.
  static Result<bool> Free(const CacheDir& dir, const std::string& name, bool check_holder);

  // Removes the temp file at `path` (its name must end with kLockedTempSuffix) when nobody
  // holds its lock and it is older than `min_age_seconds`: a killed writer's leftover.
  // Whether it was removed.
  static bool SweepStale(const std::string& path, double min_age_seconds);
};

// Closes a descriptor a locked write opened (PendingFile's, for a locked write).
void CloseLockDescriptor(int fd);

}  // namespace insitubatch::cache
