#include "tc/crash/run_program.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

extern char** environ;

namespace deuteron::crash {

Result<int> RunProgram(const std::string& program, const std::vector<std::string>& args,
                       const std::string& output_path) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  // Nothing else of ours (a client's or the proxy's socket held open by the
  // child would keep its peer from seeing it close).
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return Status::FromErrno(err, "spawn " + program);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "waitpid");
  }
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == 127) return Status::IOError("could not run " + program);
    return WEXITSTATUS(status);
  }
  return -1;
}

}  // namespace deuteron::crash
