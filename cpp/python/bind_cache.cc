// Disk tier helpers the Python side checks a cache_dir with at construction (the tier
// itself is reached through the engine and planfetch bindings).

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "insitubatch/cache/dir_lock.h"
#include "insitubatch/cache/files.h"

namespace insitubatch::python {

void BindCache(nb::module_& m) {
  m.def("cache_filesystem_type", &cache::FilesystemType, nb::arg("path"),
        "The filesystem type holding `path` (from /proc/self/mountinfo), or ''.");
  m.def(
      "cache_is_network_filesystem", [](const std::string& t) { return cache::IsNetworkFilesystem(t); },
      nb::arg("type"));
  m.def("cache_locks_work", &cache::AdvisoryLocksWork, nb::arg("dir"),
        "Whether advisory (flock) locks work in `dir`: False only where the filesystem has none (ENOLCK, "
        "EOPNOTSUPP). Creates and writes nothing.");
  m.def("cache_lock_holder", &cache::DirLock::DescribeHolder, nb::arg("dir"),
        "What the writer holding `dir` recorded (pid, host, since), or ''.");
}

}  // namespace insitubatch::python
