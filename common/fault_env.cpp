#include "common/fault_env.h"

#include <algorithm>
#include <cassert>
#include <set>
#include <string>
#include <utility>

namespace deuteron {
namespace {

using Op = FaultInjectionEnv::Op;


size_t Index(Op op) { return static_cast<size_t>(op); }

Status CrashedError(const std::string& path) {
  return Status::IOError("file " + path + " was opened before a simulated crash (crashed)");
}

}  // namespace

const char* FaultInjectionEnv::OpName(Op op) {
  switch (op) {
    case Op::kOpen: return "open";
    case Op::kRead: return "read";
    case Op::kWrite: return "write";
    case Op::kSync: return "sync";
    case Op::kMetadata: return "metadata";
    case Op::kAny: return "any";
  }
  return "unknown";
}

// A File whose changes are recorded in the shared FileState until Sync.
class FaultInjectionEnv::FaultFile final : public File {
 public:
  FaultFile(FaultInjectionEnv* env, std::unique_ptr<File> base, std::shared_ptr<FileState> state,
            uint64_t epoch, bool writable)
      : env_(env), base_(std::move(base)), state_(std::move(state)), epoch_(epoch),
        writable_(writable) {}
  ~FaultFile() override { base_->Close().PermitUncheckedError(); }

  Result<size_t> ReadAt(uint64_t offset, char* buf, size_t n) const override {
    if (env_->crashed_since(epoch_)) return CrashedError(path());
    RETURN_IF_ERROR(env_->Inject(Op::kRead, path()));
    return base_->ReadAt(offset, buf, n);
  }

  Status WriteAt(uint64_t offset, Slice data) override { return Write(&offset, data); }
  Status Append(Slice data) override { return Write(nullptr, data); }

  Status Sync() override {
    env_->WaitWhileSyncsHeld();
    if (env_->crashed_since(epoch_)) return CrashedError(path());
    RETURN_IF_ERROR(env_->Inject(Op::kSync, path()));
    // Held across the sync so that no write slips in between the sync and
    // forgetting the changes it made durable.
    std::lock_guard<std::mutex> l(state_->mu);
    if (env_->crashed_since(epoch_)) return CrashedError(path());
    RETURN_IF_ERROR(base_->Sync());
    state_->changes.clear();
    return Status::OK();
  }

  Status Truncate(uint64_t size) override {
    if (env_->crashed_since(epoch_)) return CrashedError(path());
    if (!writable_) return ReadOnlyError();
    RETURN_IF_ERROR(env_->Inject(Op::kWrite, path()));
    std::lock_guard<std::mutex> l(state_->mu);
    if (env_->crashed_since(epoch_)) return CrashedError(path());
    return TruncateLocked(size);
  }

  Result<uint64_t> Size() const override {
    if (env_->crashed_since(epoch_)) return CrashedError(path());
    return base_->Size();
  }

  Status Close() override {
    Status s = base_->Close();
    if (env_->crashed_since(epoch_)) {
      s.PermitUncheckedError();
      return CrashedError(path());
    }
    return s;
  }

  const std::string& path() const override { return base_->path(); }

  // Records and applies a truncate. REQUIRES: state_->mu held.
  Status TruncateLocked(uint64_t size) {
    ASSIGN_OR_RETURN(uint64_t old_size, base_->Size());
    Change c;
    c.truncate = true;
    c.offset = size;
    c.old_size = old_size;
    if (size < old_size) {
      c.old_bytes.resize(old_size - size);
      RETURN_IF_ERROR(base_->ReadExactAt(size, c.old_bytes.data(), c.old_bytes.size()));
    }
    Status s = base_->Truncate(size);
    state_->changes.push_back(std::move(c));  // even on failure: it may have half-happened
    return s;
  }

 private:
  Status ReadOnlyError() const {
    return Status::InvalidArgument("write to " + path() + ": opened read-only");
  }

  // WriteAt(*offset) or, with a null offset, Append.
  Status Write(const uint64_t* offset, Slice data) {
    if (env_->crashed_since(epoch_)) return CrashedError(path());
    if (!writable_) return ReadOnlyError();
    RETURN_IF_ERROR(env_->Inject(Op::kWrite, path()));
    std::lock_guard<std::mutex> l(state_->mu);
    if (env_->crashed_since(epoch_)) return CrashedError(path());
    if (data.empty()) return Status::OK();
    ASSIGN_OR_RETURN(uint64_t old_size, base_->Size());
    Change c;
    c.offset = offset != nullptr ? *offset : old_size;
    c.write_len = data.size();
    c.old_size = old_size;
    if (c.offset < old_size) {
      c.old_bytes.resize(std::min<uint64_t>(data.size(), old_size - c.offset));
      RETURN_IF_ERROR(base_->ReadExactAt(c.offset, c.old_bytes.data(), c.old_bytes.size()));
    }
    Status s = offset != nullptr ? base_->WriteAt(c.offset, data) : base_->Append(data);
    state_->changes.push_back(std::move(c));  // even on failure: it may have half-happened
    return s;
  }

  FaultInjectionEnv* const env_;
  const std::unique_ptr<File> base_;
  const std::shared_ptr<FileState> state_;
  const uint64_t epoch_;  // env_->epoch_ when opened
  const bool writable_;
};

FaultInjectionEnv::FaultInjectionEnv(Env* base, uint64_t seed)
    : EnvWrapper(base), seed_(seed), rng_(seed) {}

FaultInjectionEnv::~FaultInjectionEnv() = default;

// ---------------------------------------------------------------- injection

void FaultInjectionEnv::HoldSyncs() {
  std::lock_guard<std::mutex> l(hold_mu_);
  syncs_held_ = true;
}

void FaultInjectionEnv::ReleaseSyncs() {
  {
    std::lock_guard<std::mutex> l(hold_mu_);
    syncs_held_ = false;
  }
  hold_cv_.notify_all();
}

uint64_t FaultInjectionEnv::held_syncs() const {
  std::lock_guard<std::mutex> l(hold_mu_);
  return held_syncs_;
}

void FaultInjectionEnv::WaitWhileSyncsHeld() {
  std::unique_lock<std::mutex> l(hold_mu_);
  if (!syncs_held_) return;
  ++held_syncs_;
  hold_cv_.wait(l, [&] { return !syncs_held_; });
  --held_syncs_;
}

Status FaultInjectionEnv::Inject(Op op, const std::string& what) {
  std::lock_guard<std::mutex> l(mu_);
  return InjectLocked(op, what);
}

Status FaultInjectionEnv::InjectLocked(Op op, const std::string& what) {
  ++counts_[Index(op)];
  ++counts_[Index(Op::kAny)];
  auto hits = [&](const Failure& f) {
    return (f.op == op && counts_[Index(op)] == f.at) ||
           (f.op == Op::kAny && counts_[Index(Op::kAny)] == f.at);
  };
  auto it = std::find_if(failures_.begin(), failures_.end(), hits);
  if (it != failures_.end()) {
    const Code code = it->code;
    // Every failure aimed at this call is used up by it.
    failures_.erase(std::remove_if(failures_.begin(), failures_.end(), hits), failures_.end());
    return Status(code, std::string("injected ") + OpName(op) + " failure: " + what);
  }
  for (const RandomFailure& r : {random_[Index(op)], random_[Index(Op::kAny)]}) {
    if (r.probability <= 0) continue;
    const double draw = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);  // 2^53
    if (draw < r.probability) {
      return Status(r.code, std::string("injected random ") + OpName(op) + " failure: " + what);
    }
  }
  return Status::OK();
}

void FaultInjectionEnv::FailNth(Op op, uint64_t n, Code code) {
  assert(n >= 1 && code != Code::kOk);
  std::lock_guard<std::mutex> l(mu_);
  failures_.push_back(Failure{op, counts_[Index(op)] + n, code});
}

void FaultInjectionEnv::SetRandomFailures(Op op, double probability, Code code) {
  assert(code != Code::kOk);
  std::lock_guard<std::mutex> l(mu_);
  random_[Index(op)] = RandomFailure{probability, code};
}

void FaultInjectionEnv::ClearFailures() {
  std::lock_guard<std::mutex> l(mu_);
  failures_.clear();
  random_ = {};
}

uint64_t FaultInjectionEnv::OpCount(Op op) const {
  std::lock_guard<std::mutex> l(mu_);
  return counts_[Index(op)];
}

uint64_t FaultInjectionEnv::NextRandomLocked(uint64_t bound) {
  assert(bound > 0);
  return rng_() % bound;  // the bias is irrelevant for test choices
}

// ---------------------------------------------------------------- crashes

std::shared_ptr<FaultInjectionEnv::FileState> FaultInjectionEnv::StateLocked(
    const std::string& key) {
  std::shared_ptr<FileState>& state = files_[key];
  if (state == nullptr) state = std::make_shared<FileState>();
  return state;
}

size_t FaultInjectionEnv::UnsyncedChangeCount(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(NormalizePath(path));
  if (it == files_.end()) return 0;
  std::lock_guard<std::mutex> sl(it->second->mu);
  return it->second->changes.size();
}

Result<std::string> FaultInjectionEnv::DurableContentLocked(const std::string& key) {
  ASSIGN_OR_RETURN(std::string content, ReadFileToString(target(), key));
  auto it = files_.find(key);
  if (it == files_.end()) return content;
  std::lock_guard<std::mutex> sl(it->second->mu);
  const std::vector<Change>& changes = it->second->changes;
  for (auto c = changes.rbegin(); c != changes.rend(); ++c) {
    content.resize(c->old_size, '\0');
    if (!c->old_bytes.empty()) content.replace(c->offset, c->old_bytes.size(), c->old_bytes);
  }
  return content;
}

Status FaultInjectionEnv::UndoChangesLocked(const std::string& key, FileState* state, size_t keep,
                                            uint64_t cut) {
  std::vector<Change>& changes = state->changes;
  ASSIGN_OR_RETURN(std::unique_ptr<File> f, target()->OpenFile(key, OpenMode::kReadWrite));
  // Newest first: before undoing change i the file is as change i left it.
  for (size_t i = changes.size(); i-- > keep;) {
    const Change& c = changes[i];
    RETURN_IF_ERROR(f->Truncate(c.old_size));
    if (!c.old_bytes.empty()) RETURN_IF_ERROR(f->WriteAt(c.offset, c.old_bytes));
  }
  if (keep > 0) {  // tear the last kept write: its first `cut` bytes stay
    const Change& c = changes[keep - 1];
    if (!c.truncate && cut < c.write_len) {
      RETURN_IF_ERROR(f->Truncate(std::max(c.old_size, c.offset + cut)));
      if (cut < c.old_bytes.size()) {
        const Slice rest = Slice(c.old_bytes).sub(cut, c.old_bytes.size() - cut);
        RETURN_IF_ERROR(f->WriteAt(c.offset + cut, rest));
      }
    }
  }
  changes.clear();
  RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

Status FaultInjectionEnv::SimulateCrash(CrashMode mode) {
  std::lock_guard<std::mutex> l(mu_);
  ++epoch_;  // from here on, old handles fail (writes re-check under FileState::mu)
  Status first_error;
  auto note = [&first_error](Status s) {
    if (!s.ok() && first_error.ok()) first_error = std::move(s);
  };
  for (auto& [key, state] : files_) {  // std::map: a fixed order for the generator
    std::lock_guard<std::mutex> sl(state->mu);
    const size_t n = state->changes.size();
    if (n == 0) continue;
    size_t keep = 0;
    uint64_t cut = 0;
    if (mode == CrashMode::kTearUnsynced) {
      keep = NextRandomLocked(n + 1);
      if (keep > 0) {
        const Change& last = state->changes[keep - 1];
        if (!last.truncate) cut = 1 + NextRandomLocked(last.write_len);
      }
    }
    note(UndoChangesLocked(key, state.get(), keep, cut).WithContext("undo " + key));
    state->changes.clear();
  }
  // Directory changes, newest first.
  for (auto c = dir_changes_.rbegin(); c != dir_changes_.rend(); ++c) {
    if (!target()->FileExists(c->path)) continue;
    if (!c->rename) {
      note(target()->DeleteFile(c->path));
      continue;
    }
    note(target()->RenameFile(c->path, c->from));
    if (c->replaced) note(WriteStringToFile(target(), c->replaced_content, c->path, true));
  }
  dir_changes_.clear();
  files_.clear();
  return first_error;
}

// ---------------------------------------------------------------- corruption

Status FaultInjectionEnv::CorruptRange(const std::string& path, uint64_t offset, uint64_t len,
                                       int bits) {
  std::lock_guard<std::mutex> l(mu_);
  if (bits < 0 || static_cast<uint64_t>(bits) > 8 * len) {
    return Status::InvalidArgument("corrupt " + path + ": cannot flip " + std::to_string(bits) +
                                   " bits in " + std::to_string(len) + " bytes");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<File> f, target()->OpenFile(path, OpenMode::kReadWrite));
  std::shared_ptr<FileState> state;
  if (auto it = files_.find(NormalizePath(path)); it != files_.end()) state = it->second;
  std::unique_lock<std::mutex> sl;
  if (state != nullptr) sl = std::unique_lock<std::mutex>(state->mu);
  ASSIGN_OR_RETURN(uint64_t size, f->Size());
  if (offset + len > size) {
    return Status::InvalidArgument("corrupt " + path + ": range ends past the end of the file");
  }
  std::set<uint64_t> flips;  // bit numbers relative to offset
  while (flips.size() < static_cast<size_t>(bits)) flips.insert(NextRandomLocked(8 * len));

  std::string buf(len, '\0');
  RETURN_IF_ERROR(f->ReadExactAt(offset, buf.data(), buf.size()));
  for (uint64_t b : flips) buf[b / 8] = static_cast<char>(buf[b / 8] ^ (1 << (b % 8)));
  RETURN_IF_ERROR(f->WriteAt(offset, buf));
  RETURN_IF_ERROR(f->Sync());
  if (state != nullptr) {
    for (Change& c : state->changes) {
      for (uint64_t b : flips) {
        const uint64_t at = offset + b / 8;
        if (at >= c.offset && at < c.offset + c.old_bytes.size()) {
          char& byte = c.old_bytes[at - c.offset];
          byte = static_cast<char>(byte ^ (1 << (b % 8)));
        }
      }
    }
  }
  return f->Close();
}

// ---------------------------------------------------------------- Env

Result<std::unique_ptr<File>> FaultInjectionEnv::OpenFile(const std::string& path, OpenMode mode) {
  const std::string key = NormalizePath(path);
  std::lock_guard<std::mutex> l(mu_);  // the existence check and the open are one step
  RETURN_IF_ERROR(InjectLocked(Op::kOpen, path));
  const bool creates = mode == OpenMode::kCreate || mode == OpenMode::kCreateNew ||
                       mode == OpenMode::kTruncate;
  const bool existed = !creates || target()->FileExists(path);
  // kTruncate is recorded as a Truncate(0) so that a crash can undo it.
  const OpenMode base_mode = mode == OpenMode::kTruncate ? OpenMode::kCreate : mode;
  ASSIGN_OR_RETURN(std::unique_ptr<File> base, target()->OpenFile(path, base_mode));
  if (!existed) {
    DirChange c;
    c.path = key;
    c.sync_dir = ParentDir(key);
    dir_changes_.push_back(std::move(c));
  }
  std::shared_ptr<FileState> state = StateLocked(key);
  auto file = std::make_unique<FaultFile>(this, std::move(base), state, epoch_.load(),
                                          mode != OpenMode::kRead);
  if (mode == OpenMode::kTruncate && existed) {
    std::lock_guard<std::mutex> sl(state->mu);
    RETURN_IF_ERROR(file->TruncateLocked(0));
  }
  return std::unique_ptr<File>(std::move(file));
}

Status FaultInjectionEnv::DeleteFile(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(InjectLocked(Op::kMetadata, path));
  RETURN_IF_ERROR(target()->DeleteFile(path));
  files_.erase(NormalizePath(path));  // deletes are durable at once
  return Status::OK();
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  const std::string from_key = NormalizePath(from);
  const std::string to_key = NormalizePath(to);
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(InjectLocked(Op::kMetadata, from + " -> " + to));
  if (from_key == to_key) return target()->RenameFile(from, to);
  DirChange c;
  c.rename = true;
  c.path = to_key;
  c.from = from_key;
  c.sync_dir = ParentDir(to_key);
  if (target()->FileExists(to) && target()->FileExists(from)) {
    ASSIGN_OR_RETURN(c.replaced_content, DurableContentLocked(to_key));
    c.replaced = true;
  }
  RETURN_IF_ERROR(target()->RenameFile(from, to));
  std::shared_ptr<FileState> moved;
  if (auto it = files_.find(from_key); it != files_.end()) {
    moved = std::move(it->second);
    files_.erase(it);
  }
  files_.erase(to_key);  // the replaced file is gone; its changes with it
  if (moved != nullptr) files_[to_key] = std::move(moved);
  dir_changes_.push_back(std::move(c));
  return Status::OK();
}

Status FaultInjectionEnv::CreateDir(const std::string& dir) {
  RETURN_IF_ERROR(Inject(Op::kMetadata, dir));
  return target()->CreateDir(dir);
}

Status FaultInjectionEnv::CreateDirs(const std::string& dir) {
  RETURN_IF_ERROR(Inject(Op::kMetadata, dir));
  return target()->CreateDirs(dir);
}

Status FaultInjectionEnv::DeleteDir(const std::string& dir) {
  RETURN_IF_ERROR(Inject(Op::kMetadata, dir));
  return target()->DeleteDir(dir);
}

Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(InjectLocked(Op::kSync, dir));
  RETURN_IF_ERROR(target()->SyncDir(dir));
  const std::string key = NormalizePath(dir);
  dir_changes_.erase(std::remove_if(dir_changes_.begin(), dir_changes_.end(),
                                    [&key](const DirChange& c) { return c.sync_dir == key; }),
                     dir_changes_.end());
  return Status::OK();
}

Result<std::unique_ptr<FileLock>> FaultInjectionEnv::LockFile(const std::string& path) {
  RETURN_IF_ERROR(Inject(Op::kOpen, path));
  return target()->LockFile(path);
}

}  // namespace deuteron
