#include "common/env.h"

#include <string>

namespace deuteron {

File::~File() = default;
FileLock::~FileLock() = default;
Env::~Env() = default;

Status File::ReadExactAt(uint64_t offset, char* buf, size_t n) const {
  ASSIGN_OR_RETURN(size_t got, ReadAt(offset, buf, n));
  if (got != n) {
    return Status::Corruption("short read of " + path() + " at offset " + std::to_string(offset) +
                              ": wanted " + std::to_string(n) + " bytes, file has " +
                              std::to_string(got));
  }
  return Status::OK();
}

Status WriteStringToFile(Env* env, Slice data, const std::string& path, bool sync) {
  ASSIGN_OR_RETURN(std::unique_ptr<File> file, env->OpenFile(path, OpenMode::kTruncate));
  RETURN_IF_ERROR(file->Append(data));
  if (sync) RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

Result<std::string> ReadFileToString(Env* env, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<File> file, env->OpenFile(path, OpenMode::kRead));
  ASSIGN_OR_RETURN(uint64_t size, file->Size());
  std::string out(size, '\0');
  RETURN_IF_ERROR(file->ReadExactAt(0, out.data(), out.size()));
  RETURN_IF_ERROR(file->Close());
  return out;
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

std::string ParentDir(const std::string& path) {
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/') --end;  // "a/b/" is "a/b"
  if (end == 0) return ".";
  const size_t slash = path.rfind('/', end - 1);
  if (slash == std::string::npos) return ".";
  size_t cut = slash;
  while (cut > 0 && path[cut - 1] == '/') --cut;  // "a//b" -> "a"
  if (cut == 0) return "/";
  return path.substr(0, cut);
}

std::string NormalizePath(const std::string& path) {
  // GCC 12 warns (-Wrestrict, a known false positive) on assigning a literal
  // to a string that may be empty here; build the result without that.
  if (path.empty()) return std::string(1, '.');
  std::string out;
  out.reserve(path.size());
  for (char c : path) {
    if (c == '/' && !out.empty() && out.back() == '/') continue;
    out.push_back(c);
  }
  if (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

}  // namespace deuteron
