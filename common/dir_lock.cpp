#include "common/dir_lock.h"

#include <unistd.h>

#include <string>
#include <utility>

namespace deuteron {

DirLock::DirLock(Token, std::string dir, std::unique_ptr<FileLock> lock)
    : dir_(std::move(dir)), lock_(std::move(lock)) {}

DirLock::~DirLock() = default;

Result<std::unique_ptr<DirLock>> DirLock::Acquire(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kFileName);
  Result<std::unique_ptr<FileLock>> lock = env->LockFile(path);
  if (!lock.ok()) {
    if (!lock.status().IsBusy()) {
      return lock.status().WithContext("lock data directory " + dir);
    }
    // Best effort: the owner may not have written its pid yet.
    std::string owner;
    Result<std::string> content = ReadFileToString(env, path);
    if (content.ok()) {
      const std::string& s = *content;
      const size_t end = s.find_first_not_of("0123456789");
      const std::string digits = s.substr(0, end);
      if (!digits.empty() && digits.size() < 20) owner = " (pid " + digits + ")";
    }
    return Status::Busy("data directory " + dir + " is in use by another Deuteron process" +
                        owner);
  }
  // A separate handle: the lock is on its own open file description.
  const std::string pid = std::to_string(::getpid()) + "\n";
  Status written = WriteStringToFile(env, pid, path, /*sync=*/false);
  if (!written.ok()) return written.WithContext("write pid to " + path);
  return std::make_unique<DirLock>(Token(), dir, std::move(*lock));
}

}  // namespace deuteron
