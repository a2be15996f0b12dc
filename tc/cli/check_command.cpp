#include "tc/cli/check_command.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "common/dir_lock.h"
#include "common/env.h"
#include "common/logging.h"
#include "dc/dc.h"
#include "tc/cli/store_check.h"

namespace deuteron::cli {
namespace {

namespace fs = std::filesystem;

struct CheckArgs {
  std::string dir;
  bool no_tree = false;
  std::string scratch;
};

// Where a directory keeps what, by the files it holds.
struct Layout {
  std::string log_dir;  // empty: no log here
  std::string dc_dir;   // empty: no DC here
  const char* kind = "";
};

Layout Detect(Env* env, const std::string& dir) {
  Layout l;
  if (env->FileExists(JoinPath(dir, "log"))) l.log_dir = JoinPath(dir, "log");
  if (env->FileExists(JoinPath(dir, "dc/IDENTITY"))) {
    l.dc_dir = JoinPath(dir, "dc");
  } else if (env->FileExists(JoinPath(dir, "IDENTITY"))) {
    l.dc_dir = dir;
  }
  if (!l.log_dir.empty() && !l.dc_dir.empty()) {
    l.kind = "a `serve` store: the log in log/, the DC in dc/";
  } else if (!l.log_dir.empty()) {
    l.kind = "a `tc` store: the log in log/ (its DC lives elsewhere)";
  } else if (!l.dc_dir.empty()) {
    l.kind = "a `dc` store";
  }
  return l;
}

// Copies the DC's files (not its LOCK) into a fresh directory under
// `scratch_root`, opens a DC there without background work and runs the
// Bw-tree's Check. The copy is removed afterwards.
void CheckTree(const std::string& dc_dir, const std::string& scratch_root, CheckReport* report) {
  std::error_code ec;
  const fs::path root = scratch_root.empty() ? fs::temp_directory_path(ec) : fs::path(scratch_root);
  std::string tmpl = (root / "deuteron-check-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    report->Problem(root.string(), 0, "cannot make a scratch directory for the tree check (--scratch)");
    return;
  }
  const fs::path copy = fs::path(tmpl) / "dc";
  fs::copy(dc_dir, copy, fs::copy_options::recursive, ec);
  if (!ec) fs::remove(copy / DirLock::kFileName, ec);
  ec.clear();
  dc::DcOptions o;
  o.checkpoint_interval_bytes = 0;
  o.checkpoint_interval_ms = 0;
  o.llama.cleaning_trigger_segments = 0;
  Result<std::unique_ptr<dc::Dc>> dc = dc::Dc::Open(Env::Posix(), copy.string(), o);
  if (!dc.ok()) {
    report->Problem(dc_dir, 0, "the DC does not open (on a copy): " + dc.status().ToString());
  } else {
    Status s = (*dc)->CheckTree();
    Result<DcStats> stats = (*dc)->GetStats();
    if (s.ok()) {
      report->Checked("tree", "Bw-tree Check: consistent (" +
                                  (stats.ok() ? std::to_string(stats->pages) + " pages, height " +
                                                    std::to_string(stats->tree_height)
                                              : std::string("no stats")) +
                                  ")");
    } else {
      report->Problem(dc_dir, 0, "Bw-tree Check: " + s.ToString());
    }
    (*dc)->Close().PermitUncheckedError();
  }
  fs::remove_all(tmpl, ec);
}

int RunCheck(const CheckArgs& a) {
  // The scratch DC's info lines (open, close) would bury the report.
  if (std::getenv("DEUTERON_LOG") == nullptr) SetLogLevel(LogLevel::kWarn);
  Env* env = Env::Posix();
  const Layout layout = Detect(env, a.dir);
  if (layout.log_dir.empty() && layout.dc_dir.empty()) {
    std::fprintf(stderr,
                 "deuteron check: %s is not a Deuteron store: it holds no log/ and no IDENTITY "
                 "(nor dc/IDENTITY)\n",
                 a.dir.c_str());
    return 1;
  }
  // The servers' locks: the TC's (serve, tc) in DIR, the DC's in its own
  // directory. Holding them keeps any server out while we read.
  std::vector<std::unique_ptr<DirLock>> locks;
  std::vector<std::string> lock_dirs;
  if (!layout.log_dir.empty()) lock_dirs.push_back(a.dir);
  if (!layout.dc_dir.empty() && layout.dc_dir != a.dir) lock_dirs.push_back(layout.dc_dir);
  if (layout.log_dir.empty()) lock_dirs.push_back(layout.dc_dir);
  for (const std::string& d : lock_dirs) {
    Result<std::unique_ptr<DirLock>> lock = DirLock::Acquire(env, d);
    if (!lock.ok()) {
      if (lock.status().code() == Code::kBusy) {
        std::fprintf(stderr, "deuteron check: refused: %s; stop that server first (check reads a stopped store)\n",
                     std::string(lock.status().message()).c_str());
      } else {
        std::fprintf(stderr, "deuteron check: lock %s: %s\n", d.c_str(), lock.status().ToString().c_str());
      }
      return 1;
    }
    locks.push_back(std::move(lock).value());
  }
  std::printf("deuteron check: %s (%s)\n", a.dir.c_str(), layout.kind);
  std::fflush(stdout);
  CheckReport report;
  report.Checked("lock", "free: held for the check");
  StoreId log_id, dc_id;
  if (!layout.log_dir.empty()) CheckLog(env, layout.log_dir, &report, &log_id);
  if (!layout.dc_dir.empty()) {
    CheckDcFiles(env, layout.dc_dir, &report, &dc_id);
    if (!layout.log_dir.empty()) {
      if (dc_id.nil()) {
        report.Checked("identity", "the DC has not adopted a store id yet; the log's is " + log_id.ToString());
      } else if (!log_id.nil() && log_id != dc_id) {
        report.Problem(JoinPath(layout.dc_dir, dc::kDcMetaFileName), 36,
                       "store id " + dc_id.ToString() + " is not the log's (" + log_id.ToString() +
                           "): the DC belongs to another store");
      } else {
        report.Checked("identity", "the log and the DC belong to store " + log_id.ToString());
      }
    }
    if (a.no_tree) {
      report.Checked("tree", "skipped (--no-tree)");
    } else if (!report.clean()) {
      report.Checked("tree", "skipped: the DC's files have problems");
    } else {
      CheckTree(layout.dc_dir, a.scratch, &report);
    }
  }
  const size_t n = report.problems().size();
  if (n == 0) {
    std::printf("deuteron check: clean\n");
    return 0;
  }
  std::printf("deuteron check: %zu problem%s\n", n, n == 1 ? "" : "s");
  return 1;
}

}  // namespace

void AddCheckCommand(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Checks a stopped store offline: the log (record checksums and structure, wal.meta), the LSS\n"
      "(segment headers, buffers, records, checksums, IDENTITY, checkpoints), dc.meta, the store\n"
      "identity, and the Bw-tree's Check on a scratch copy of the DC. Prints what it checked and\n"
      "each problem with its file and offset; exits 0 only when clean. Refuses a directory a\n"
      "running server holds.");
  cmd->add_option("--dir", a->dir, "the store: a serve, tc or dc data directory")
      ->required()
      ->type_name("DIR")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--no-tree", a->no_tree, "skip the Bw-tree check (it copies the DC's files)");
  cmd->add_option("--scratch", a->scratch, "where the tree check copies the DC (default: $TMPDIR or /tmp)")
      ->type_name("DIR")
      ->check(CLI::ExistingDirectory);
  cmd->callback([a, &runner] { runner.Set([a] { return RunCheck(*a); }); });
}

}  // namespace deuteron::cli
