// The shell's interpreter (tc/cli/shell.h) over an embedded client: words and
// quoting, autocommit, explicit transactions, scans, errors that say what
// happened, and a deadlock that ends the open transaction.
#include "tc/cli/shell.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "common/logging.h"
#include "tc/client/client.h"
#include "tests/tc/cli/cli_util.h"

namespace deuteron::cli {
namespace {

std::unique_ptr<client::Client> OpenClient(const std::string& dir) {
  SetLogLevel(LogLevel::kWarn);
  client::EmbeddedOptions o;
  o.lock_timeout = std::chrono::milliseconds(300);
  auto c = client::Client::OpenEmbedded(dir, o);
  REQUIRE(c.ok());
  return std::move(c).value();
}

// Runs a line that must succeed; returns its output.
std::string Ok(Shell& shell, const std::string& line) {
  ShellReply r = shell.Execute(line);
  INFO(line << " -> " << r.error);
  CHECK(r.error.empty());
  return r.text;
}

std::string Err(Shell& shell, const std::string& line) {
  ShellReply r = shell.Execute(line);
  INFO(line << " -> " << r.text);
  CHECK(!r.error.empty());
  return r.error;
}

TEST_CASE("shell words: blanks split, quotes group, escapes round-trip", "[tc][cli][shell]") {
  auto w = SplitShellWords("  put  \"a b\" x\\y \"q\\\"\\x41\\n\"  ");
  REQUIRE(w.ok());
  REQUIRE(w->size() == 4);
  CHECK((*w)[1] == "a b");
  CHECK((*w)[2] == "x\\y");  // a backslash outside quotes is literal
  CHECK((*w)[3] == "q\"A\n");
  CHECK(SplitShellWords("get \"open").status().IsInvalidArgument());
  CHECK(SplitShellWords("get \"\\q\"").status().IsInvalidArgument());
  CHECK(SplitShellWords("get \"\\x4\"").status().IsInvalidArgument());
  const std::string nasty("a \"b\"\\\n\t\x01\xff", 10);
  for (const std::string& s : {std::string("plain"), std::string(), nasty, std::string("#x")}) {
    auto back = SplitShellWords(QuoteShellWord(s));
    REQUIRE(back.ok());
    REQUIRE(back->size() == 1);
    CHECK((*back)[0] == s);
  }
  CHECK(QuoteShellWord("plain") == "plain");
  CHECK(QuoteShellWord("a b") == "\"a b\"");
}

TEST_CASE("shell: autocommit, a transaction, scans and its own errors", "[tc][cli][shell]") {
  const std::string dir = test::TempDir();
  auto c = OpenClient(dir);
  Shell shell(c.get());
  CHECK(shell.Prompt() == "deuteron> ");
  CHECK(Ok(shell, "put alpha 1") == "ok\n");
  CHECK(Ok(shell, "get alpha") == "1\n");
  CHECK(Ok(shell, "get beta") == "(not found)\n");
  CHECK(Ok(shell, "   # a comment") == "");
  CHECK(Ok(shell, "") == "");

  CHECK(Ok(shell, "begin").find("begun transaction") == 0);
  CHECK(shell.in_transaction());
  CHECK(shell.Prompt().find("deuteron(txn ") == 0);
  CHECK(Err(shell, "begin").find("already open") != std::string::npos);
  Ok(shell, "put beta \"two words\"");
  Ok(shell, "put gamma 3");
  Ok(shell, "del alpha");
  CHECK(Ok(shell, "scan") == "beta \"two words\"\ngamma 3\n(2 items)\n");
  CHECK(Ok(shell, "abort") == "aborted\n");
  CHECK(!shell.in_transaction());
  CHECK(Ok(shell, "scan") == "alpha 1\n(1 item)\n");  // the aborted writes are gone

  Ok(shell, "begin");
  Ok(shell, "put beta 2");
  Ok(shell, "put gamma 3");
  CHECK(Ok(shell, "commit").find("committed (") == 0);
  CHECK(Ok(shell, "scan beta - --reverse") == "gamma 3\nbeta 2\n(2 items)\n");
  CHECK(Ok(shell, "scan - gamma") == "alpha 1\nbeta 2\n(2 items)\n");
  CHECK(Ok(shell, "scan -n 1 -r") == "gamma 3\n(1 item)\n");

  CHECK(Err(shell, "commit").find("no transaction is open") != std::string::npos);
  CHECK(Err(shell, "abort").find("no transaction is open") != std::string::npos);
  CHECK(Err(shell, "frobnicate x") == "error: unknown command 'frobnicate' (help lists the commands)\n");
  CHECK(Err(shell, "get").find("usage: get KEY") != std::string::npos);
  CHECK(Err(shell, "put k").find("usage: put KEY VALUE") != std::string::npos);
  CHECK(Err(shell, "scan --limit x").find("usage: scan") != std::string::npos);
  CHECK(Err(shell, "get \"open").find("unterminated quote") != std::string::npos);
  CHECK(Ok(shell, "help").find("scan [LOWER [UPPER]]") != std::string::npos);
  CHECK(Ok(shell, "help put") == "put KEY VALUE: set KEY to VALUE\n");
  const std::string stats = Ok(shell, "stats");
  CHECK(stats.find("8 commits (7 of them autocommits), 1 aborts") != std::string::npos);
  CHECK(shell.Execute("quit").quit);
}

TEST_CASE("shell: a lock failure ends the open transaction and says so", "[tc][cli][shell]") {
  const std::string dir = test::TempDir();
  auto c = OpenClient(dir);
  Shell a(c.get()), b(c.get());
  Ok(a, "put k 0");
  Ok(a, "begin");
  Ok(a, "put k 1");  // X lock on k until a ends
  Ok(b, "begin");
  const std::string e = Err(b, "get k");  // waits 300 ms for the lock, then TimedOut
  CHECK(e.find("TimedOut") != std::string::npos);
  CHECK(e.find("run it again") != std::string::npos);
  CHECK(e.find("the transaction is over") != std::string::npos);
  CHECK(!b.in_transaction());
  Ok(a, "commit");
  CHECK(Ok(b, "get k") == "1\n");  // autocommit again
  // Quitting with a transaction open aborts it.
  Ok(b, "begin");
  Ok(b, "put k 2");
  ShellReply q = b.Execute("exit");
  CHECK(q.quit);
  CHECK(q.text == "aborted the open transaction\n");
  CHECK(Ok(a, "get k") == "1\n");
}

}  // namespace
}  // namespace deuteron::cli
