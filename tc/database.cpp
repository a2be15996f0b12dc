#include "tc/database.h"

#include "common/logging.h"

namespace deuteron::tc {

namespace {

// A directory written by a newer format is another store as far as this
// build can tell: refuse it as such, naming the path.
Status NewerIsMismatch(Status s, const std::string& path) {
  if (s.code() != Code::kNotSupported) return s;
  return Status::StoreMismatch(path + " is of a newer format than this build reads: " +
                               std::string(s.message()));
}

}  // namespace

Result<std::unique_ptr<Database>> Database::Open(const std::string& dir, DatabaseOptions options) {
  Env* env = options.env != nullptr ? options.env : Env::Posix();
  if (Status s = env->CreateDirs(dir); !s.ok()) return s;
  std::unique_ptr<Database> db(new Database());
  Result<std::unique_ptr<DirLock>> lock = DirLock::Acquire(env, dir);
  if (!lock.ok()) return lock.status();
  db->lock_ = std::move(lock).value();
  Result<std::unique_ptr<dc::Dc>> dc = dc::Dc::Open(env, dir + "/dc", options.dc);
  if (!dc.ok()) return NewerIsMismatch(dc.status(), dir + "/dc").WithContext("open the DC");
  db->dc_ = std::move(dc).value();
  Result<std::unique_ptr<wal::Log>> log = wal::Log::Open(env, dir + "/log", options.log);
  if (!log.ok()) return NewerIsMismatch(log.status(), dir + "/log").WithContext("open the log");
  db->log_ = std::move(log).value();
  Result<std::unique_ptr<TxnManager>> tm = TxnManager::Open(db->dc_.get(), db->log_.get(), options.txn);
  if (!tm.ok()) return tm.status();
  db->tm_ = std::move(tm).value();
  return db;
}

Database::~Database() {
  Status s = Close();
  if (!s.ok()) DLOG_ERROR("Database close: {}", s.ToString());
}

Status Database::Close() {
  if (closed_) return Status::OK();
  closed_ = true;
  Status result;
  auto keep = [&result](Status s) {
    if (!s.ok() && result.ok()) result = std::move(s);
  };
  if (tm_ != nullptr) keep(tm_->Close());
  tm_.reset();
  if (log_ != nullptr) keep(log_->Close());
  log_.reset();
  if (dc_ != nullptr) keep(dc_->Close());
  dc_.reset();
  lock_.reset();
  return result;
}

}  // namespace deuteron::tc
