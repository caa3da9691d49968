#include "insitubatch/util/env.h"

#include <cstdlib>
#include <fstream>

namespace insitubatch {

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::optional<std::string> NonEmptyEnv(const EnvLookup& env, std::string_view name) {
  auto v = env(name);
  if (v && !v->empty()) return v;
  return std::nullopt;
}

const std::string& BootId() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string text;
    std::getline(in, text);
    // A UUID, or nothing: never trust what does not look like one.
    return text.size() == 36 && text.find_first_not_of("0123456789abcdef-") == std::string::npos ? text : std::string();
  }();
  return id;
}

namespace {
// Set up as the library loads, on the thread that loads it, before any of its threads
// runs: a function-local static is initialized under a guard, and a process forked while
// another thread held that guard (a DataLoader worker forked while a download thread
// sealed its first object) would wait on it forever.
[[maybe_unused]] const bool kBootIdAtLoad = (BootId(), true);
}  // namespace

}  // namespace insitubatch
