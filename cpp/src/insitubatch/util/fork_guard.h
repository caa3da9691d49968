#pragma once

// ForkGuard: what an object that owns threads remembers about the process that started
// them. After fork() the child has none of those threads (and any lock one of them held
// stays held), so the child must neither hand them work nor join them: it fails the work
// at once with a clear error and leaks the thread handles instead of waiting forever.

#include <unistd.h>

#include <thread>
#include <utility>
#include <vector>

namespace insitubatch {

class ForkGuard {
 public:
  ForkGuard() : pid_(::getpid()) {}
  // True in a child forked after this object was created.
  bool forked() const { return ::getpid() != pid_; }

 private:
  pid_t pid_;
};

// Leaks whatever is moved in (thread handles that only ran in the parent, state their
// destructors would lock or join): it must not be destroyed in a forked child.
template <typename T>
void AbandonAfterFork(T&& object) {
  new std::decay_t<T>(std::forward<T>(object));  // intentionally never freed
}

inline constexpr const char* kOpenedBeforeFork =
    "was opened before fork(): its threads exist only in the parent process. Open it again "
    "in the child (a dataset does this on its own), or use the spawn or forkserver start "
    "method";

}  // namespace insitubatch
