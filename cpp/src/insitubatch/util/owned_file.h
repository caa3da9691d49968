#pragma once

// The one rule for every file the product writes in a directory it owns (the disk cache,
// planfetch's object cache, the file store's write temporaries): it writes only through a
// file it made. Either the file is created fresh -- O_CREAT | O_EXCL under a name nobody
// can predict, another name when one is taken -- and renamed into place, or, where a file
// must be reopened for writing (a lock, an append-only log), the open descriptor is checked
// to be a regular file with exactly one link before anything is written.
//
// Why both: O_NOFOLLOW refuses a planted symlink but does not see a hard link. A second
// name planted for a file outside the directory (an authorized_keys) opens like any file of
// ours, and writing it writes the outside file. A file of ours has one name; a planted link
// has two or more. Here in util because both the cache layer and the io layer's file store
// write this way, and neither may include the other.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace insitubatch {

// A file CreateFreshFile made: its descriptor (the caller closes it) and its name.
struct FreshFile {
  int fd = -1;
  std::string name;
};

// Creates a new file in the directory `dir_fd` (AT_FDCWD: relative to the working
// directory) named `name_for(nonce)`, nonce a random 64-bit number, opened with `flags` |
// O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC. A name already taken (planted ahead, or
// another writer's) costs another nonce, not the write. On failure `fd` is -errno of the
// last attempt (EEXIST only if every attempt found its name taken) and `name` its name.
FreshFile CreateFreshFile(int dir_fd, const std::function<std::string(uint64_t nonce)>& name_for, int flags,
                          mode_t mode);

// What the open file `fd` is when the product must not write through it: "" for a regular
// file with at most one link; else "a symbolic link", "a FIFO", "a directory", "a hard link
// (one of 2 names of a file)", ... `writing`: the link count matters (a second name only
// matters to a writer).
std::string NotOwnFile(int fd, bool writing);

// The kind of file `mode` describes, for messages: "a directory", "a FIFO", ...
std::string_view FileKindOf(mode_t mode);

}  // namespace insitubatch
