#pragma once

// Environment variables as the credential chains read them: through an EnvLookup, so tests
// (and callers that resolve for another process) can pass a fixed environment.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace insitubatch {

// The value of a variable, or nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;
// This process's environment.
EnvLookup ProcessEnv();
// A fixed environment holding exactly `vars`.
EnvLookup MapEnv(std::map<std::string, std::string> vars);
// The variable's value when it is set and not empty.
std::optional<std::string> NonEmptyEnv(const EnvLookup& env, std::string_view name);

// This boot of the machine (/proc/sys/kernel/random/boot_id; "" where unknown). A file
// written since it began can have lost no page to a crash or power loss: its bytes are the
// page cache's, which the disk caches use to skip checking what they revive.
const std::string& BootId();

}  // namespace insitubatch
