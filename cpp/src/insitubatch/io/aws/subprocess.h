#pragma once

// RunProcess: runs a program (no shell) and collects what it prints -- for credential
// helpers such as AWS's credential_process. Standard input is /dev/null; both outputs are
// read concurrently (so neither pipe fills and stalls the child) up to a byte limit, past
// which the child is killed and the call fails.

#include <cstddef>
#include <string>
#include <vector>

#include "insitubatch/util/result.h"

namespace insitubatch {

struct ProcessOutput {
  int exit_code = 0;  // 128 + N when killed by signal N
  std::string standard_output;
  std::string standard_error;
};

// `argv[0]` is looked up on PATH. NotFound when it cannot be started.
Result<ProcessOutput> RunProcess(const std::vector<std::string>& argv, size_t max_output_bytes);

}  // namespace insitubatch
