// Offline integrity checks of a stopped store's files, for `deuteron check`
// (tc/cli/check_command.h): the TC's log (tc/wal/log_format.md) and the
// DC's LSS, its IDENTITY and checkpoints (dc/llama/lss_format.md,
// dc/llama/checkpoint.h) and dc.meta (dc/dc.md). They read only; each
// finding is a CheckReport problem naming the file and byte offset.
//
// What counts as damage is what recovery would refuse (or silently lose):
//  - log: a record that is not valid (tc/wal/log_format.md, "Reading") at a
//    position some later valid record proves was durable (its esl_seen is
//    above it); a missing wal.meta, RSSP segment or middle segment; a
//    segment file of the wrong size. An invalid record nothing proves
//    durable is the end of the log (a torn tail), reported as information.
//  - LSS: a bad segment header (magic, checksum, number, store); an invalid
//    or missing buffer below the highest stable_at_seal of any valid buffer
//    or below dc.meta's stable_lss; a record that does not decode inside a
//    buffer whose checksum holds; a checkpoint entry that points at or past
//    the valid end of its segment (a truncated segment) or into a missing
//    segment file.
//
// Thread safety: free functions and a value type; a CheckReport is used by
// one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/store_id.h"

namespace deuteron::cli {

class CheckReport {
 public:
  struct Problem {
    std::string file;
    uint64_t offset = 0;
    std::string what;
  };

  // One line of what was checked (printed as it comes when `print`).
  void Checked(const std::string& area, const std::string& what);
  void Problem(const std::string& file, uint64_t offset, const std::string& what);

  const std::vector<struct Problem>& problems() const { return problems_; }
  bool clean() const { return problems_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }

  // Print lines to stdout as they come (default true).
  void set_print(bool print) { print_ = print; }

 private:
  bool print_ = true;
  std::vector<std::string> lines_;
  std::vector<struct Problem> problems_;
};

// Checks the log in `log_dir`; *store_id gets wal.meta's store id (nil when
// none could be read).
void CheckLog(Env* env, const std::string& log_dir, CheckReport* report, StoreId* store_id);

// Checks the DC store in `dc_dir` (IDENTITY, lss/, ckpt-*, dc.meta);
// *store_id gets dc.meta's store id (nil when none).
void CheckDcFiles(Env* env, const std::string& dc_dir, CheckReport* report, StoreId* store_id);

}  // namespace deuteron::cli
