#include "insitubatch/io/aws/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "insitubatch/util/text.h"

extern char** environ;

namespace insitubatch {
namespace {

struct Pipe {
  int read = -1, write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

}  // namespace

Result<ProcessOutput> RunProcess(const std::vector<std::string>& argv, size_t max_output_bytes) {
  if (argv.empty()) return InvalidArgument("RunProcess: no program");
  Pipe out, err;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe: " + ErrnoText(errno));
  out.read = fds[0], out.write = fds[1];
  if (::pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe: " + ErrnoText(errno));
  err.read = fds[0], err.write = fds[1];

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write, 1);
  posix_spawn_file_actions_adddup2(&actions, err.write, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return NotFound("cannot run " + argv[0] + ": " + ErrnoText(spawned));
  }
  ::close(out.write), out.write = -1;
  ::close(err.write), err.write = -1;

  ProcessOutput result;
  bool too_much = false;
  pollfd polls[2] = {{out.read, POLLIN, 0}, {err.read, POLLIN, 0}};
  std::string* sinks[2] = {&result.standard_output, &result.standard_error};
  int open_pipes = 2;
  char buf[4096];
  while (open_pipes > 0 && !too_much) {
    if (::poll(polls, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (polls[i].fd < 0 || polls[i].revents == 0) continue;
      const ssize_t n = ::read(polls[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        polls[i].fd = -1;  // EOF (or an error): stop polling it
        --open_pipes;
        continue;
      }
      sinks[i]->append(buf, static_cast<size_t>(n));
      if (result.standard_output.size() + result.standard_error.size() > max_output_bytes) {
        too_much = true;
      }
    }
  }
  if (too_much) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (too_much) {
    return ResourceExhausted(argv[0] + " printed more than " + std::to_string(max_output_bytes) + " bytes");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace insitubatch
