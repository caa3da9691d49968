// insitubatch._ext: the native core. One bind_<topic>.cc per topic.

#include <cstdlib>
#include <string_view>

#include "bindings.h"

NB_MODULE(_ext, m) {
  m.doc() = "insitubatch native core (C++20)";
  // A dataset still referenced at exit (a daemon thread, a module global) is not a leak
  // worth a warning to a user: the process is ending. The test suite turns the warnings on
  // (INSITUBATCH_LEAK_WARNINGS=1, tests/conftest.py) to catch what the package itself leaks.
  const char* leak_warnings = std::getenv("INSITUBATCH_LEAK_WARNINGS");
  nanobind::set_leak_warnings(leak_warnings != nullptr && std::string_view(leak_warnings) == "1");
  insitubatch::python::RecordMainThread();
  m.def(
      "_mark_exiting", [] { insitubatch::python::g_exiting = true; },
      "From now on threads other than the main one never wait for the GIL (atexit).");
  insitubatch::python::BindErrors(m);
  insitubatch::python::BindStores(m);
  insitubatch::python::BindCloudStores(m);
  insitubatch::python::BindPythonStore(m);
  insitubatch::python::BindZarr(m);
  insitubatch::python::BindBuildInfo(m);
  insitubatch::python::BindTransforms(m);
  insitubatch::python::BindStats(m);
  insitubatch::python::BindEngine(m);
  insitubatch::python::BindBench(m);
  insitubatch::python::BindOrder(m);
  insitubatch::python::BindSizing(m);
  insitubatch::python::BindCache(m);
  insitubatch::python::BindPrefetch(m);
  insitubatch::python::BindTrace(m);
}
