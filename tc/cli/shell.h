// The interpreter behind `deuteron shell` (tc/cli/shell_command.h): takes one
// line at a time and runs it against a client::Client, producing the text to
// show. It knows nothing of terminals, so tests drive it with strings.
//
// Commands (`help` lists them):
//   begin | commit | abort
//   get KEY | put KEY VALUE | del KEY
//   scan [LOWER [UPPER]] [--limit N] [--reverse]   ("-" for an open bound)
//   stats | help [COMMAND] | quit | exit
// Outside a transaction get, put, del and scan each run in a transaction of
// their own that commits at once (autocommit, retried on Deadlock/TimedOut).
// Words are separated by blanks; "double quotes" group a word and take the
// escapes \" \\ \n \t \r \0 and \xHH, so any byte string can be written.
// Values are printed as written when plain, otherwise quoted the same way.
// Blank lines and lines starting with '#' do nothing.
//
// Thread safety: a Shell is driven by one thread. The Client must outlive
// it; an open transaction is aborted when the Shell is destroyed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tc/client/client.h"

namespace deuteron::cli {

// What one line produced.
struct ShellReply {
  std::string text;     // for standard output (each line ends in '\n')
  std::string error;    // for standard error ("error: ...\n"); empty: none
  bool quit = false;    // the line asked to leave
};

// Splits a line into words (see the header comment). InvalidArgument on an
// unterminated quote or a bad escape.
Result<std::vector<std::string>> SplitShellWords(std::string_view line);
// `bytes` as a word SplitShellWords reads back: as is when it is nonempty
// printable ASCII without blanks, quotes or backslashes; quoted otherwise.
std::string QuoteShellWord(std::string_view bytes);

class Shell {
 public:
  // `server_stats`, when set, adds its text to `stats` (e.g. a server's
  // figures); the Shell always shows its own session's.
  explicit Shell(client::Client* client, std::function<std::string()> server_stats = {});
  ~Shell();
  Shell(const Shell&) = delete;
  Shell& operator=(const Shell&) = delete;

  ShellReply Execute(std::string_view line);

  // "deuteron> ", or "deuteron(txn N)> " while a transaction is open.
  std::string Prompt() const;
  bool in_transaction() const { return txn_ != nullptr; }
  // Aborts the open transaction, if any; true when there was one.
  bool AbortOpen();

 private:
  using Op = std::function<Status(client::Transaction&, std::string*)>;
  // Runs op in the open transaction, or in one of its own that commits.
  void RunOp(const Op& op, ShellReply* reply);
  void Begin(ShellReply* reply);
  void Commit(ShellReply* reply);
  void Abort(ShellReply* reply);
  void Stats(ShellReply* reply) const;
  // Records a failure; drops the open transaction when it was ended by it.
  void Fail(const Status& s, ShellReply* reply);

  client::Client* const client_;
  const std::function<std::string()> server_stats_;
  std::unique_ptr<client::Transaction> txn_;
  // This session's figures.
  uint64_t commands_ = 0, commits_ = 0, autocommits_ = 0, aborts_ = 0, errors_ = 0;
  uint64_t commit_us_total_ = 0, commit_us_max_ = 0, commit_us_last_ = 0;
};

}  // namespace deuteron::cli
