#include "tc/cli/shell.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <utility>

namespace deuteron::cli {
namespace {

constexpr const char* kHelp =
    "commands:\n"
    "  begin                      open a transaction (until commit or abort)\n"
    "  get KEY                    print KEY's value, or (not found)\n"
    "  put KEY VALUE              set KEY to VALUE\n"
    "  del KEY                    delete KEY\n"
    "  scan [LOWER [UPPER]] [--limit N] [--reverse]\n"
    "                             print the keys in [LOWER, UPPER) and their values\n"
    "                             (\"-\" for an open bound)\n"
    "  commit                     commit the open transaction (durable when it says so)\n"
    "  abort                      abort the open transaction\n"
    "  stats                      this session's figures\n"
    "  help [COMMAND]             this list, or one command's\n"
    "  quit, exit                 leave (an open transaction is aborted)\n"
    "Outside a transaction get, put, del and scan each commit at once.\n"
    "Words are split at blanks; \"double quotes\" keep blanks and take the escapes\n"
    "\\\" \\\\ \\n \\t \\r \\0 \\xHH.\n";

struct CommandHelp {
  const char* name;
  const char* text;
};

constexpr CommandHelp kCommandHelp[] = {
    {"begin", "begin: open a transaction; get, put, del and scan then run in it until commit or abort\n"},
    {"get", "get KEY: print KEY's value, or (not found)\n"},
    {"put", "put KEY VALUE: set KEY to VALUE\n"},
    {"del", "del KEY: delete KEY (deleting an absent key is no error)\n"},
    {"scan",
     "scan [LOWER [UPPER]] [--limit N] [--reverse]: print the keys from LOWER (inclusive)\n"
     "to UPPER (exclusive) with their values, then the count; \"-\" is an open bound\n"},
    {"commit", "commit: commit the open transaction; \"committed\" means durable\n"},
    {"abort", "abort: abort the open transaction, dropping its writes\n"},
    {"stats", "stats: this session's commands, commits, aborts, errors and commit latency\n"},
    {"help", "help [COMMAND]: the list of commands, or one command's\n"},
    {"quit", "quit: leave the shell (an open transaction is aborted)\n"},
    {"exit", "exit: leave the shell (an open transaction is aborted)\n"},
};

// What a person should do about a failure, when there is something to say.
const char* Hint(const Status& s) {
  switch (s.code()) {
    case Code::kDeadlock:
      return "the transaction was chosen as a deadlock victim and aborted; run it again";
    case Code::kTimedOut:
      return "a lock wait timed out and the transaction was aborted; run it again";
    case Code::kTransactionFinished:
      return "the transaction is over; begin a new one";
    case Code::kUnavailable:
      return "the server cannot be reached; a commit that failed this way may or may not "
             "have committed";
    case Code::kBusy:
      return "too many transactions open, or the store is in use by another process";
    case Code::kTooLarge:
      return "a key or value is over the server's limits";
    case Code::kShuttingDown:
      return "the server is shutting down";
    case Code::kUnauthenticated:
      return "the server wants its shared secret (--secret-file or $DEUTERON_SECRET)";
    default:
      return nullptr;
  }
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

uint64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
}

std::string Usage(std::string_view command) {
  for (const CommandHelp& h : kCommandHelp) {
    if (command == h.name) return std::string("usage: ") + h.text;
  }
  return "usage: see help\n";
}

}  // namespace

Result<std::vector<std::string>> SplitShellWords(std::string_view line) {
  std::vector<std::string> words;
  size_t i = 0;
  while (true) {
    while (i < line.size() && IsBlank(line[i])) ++i;
    if (i == line.size()) break;
    std::string word;
    while (i < line.size() && !IsBlank(line[i])) {
      if (line[i] != '"') {
        word.push_back(line[i++]);
        continue;
      }
      ++i;  // opening quote: up to the closing one, blanks included
      while (true) {
        if (i == line.size()) return Status::InvalidArgument("unterminated quote");
        const char c = line[i++];
        if (c == '"') break;
        if (c != '\\') {
          word.push_back(c);
          continue;
        }
        if (i == line.size()) return Status::InvalidArgument("unterminated quote");
        const char e = line[i++];
        switch (e) {
          case '"': word.push_back('"'); break;
          case '\\': word.push_back('\\'); break;
          case 'n': word.push_back('\n'); break;
          case 't': word.push_back('\t'); break;
          case 'r': word.push_back('\r'); break;
          case '0': word.push_back('\0'); break;
          case 'x': {
            const int hi = i < line.size() ? HexDigit(line[i]) : -1;
            const int lo = i + 1 < line.size() ? HexDigit(line[i + 1]) : -1;
            if (hi < 0 || lo < 0) return Status::InvalidArgument("\\x takes two hex digits");
            word.push_back(static_cast<char>(hi * 16 + lo));
            i += 2;
            break;
          }
          default:
            return Status::InvalidArgument(std::string("unknown escape \\") + e);
        }
      }
    }
    words.push_back(std::move(word));
  }
  return words;
}

std::string QuoteShellWord(std::string_view bytes) {
  bool plain = !bytes.empty();
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '"' || c == '\\' || c == '#') plain = false;
  }
  if (plain) return std::string(bytes);
  std::string out = "\"";
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (u < 0x20 || u >= 0x7f) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\x";
          out.push_back(kHex[u >> 4]);
          out.push_back(kHex[u & 15]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

Shell::Shell(client::Client* client, std::function<std::string()> server_stats)
    : client_(client), server_stats_(std::move(server_stats)) {}

Shell::~Shell() { AbortOpen(); }

bool Shell::AbortOpen() {
  if (txn_ == nullptr) return false;
  txn_->Abort();
  txn_.reset();
  ++aborts_;
  return true;
}

std::string Shell::Prompt() const {
  if (txn_ == nullptr) return "deuteron> ";
  return "deuteron(txn " + std::to_string(txn_->id()) + ")> ";
}

void Shell::Fail(const Status& s, ShellReply* reply) {
  ++errors_;
  reply->error += "error: " + s.ToString();
  if (const char* hint = Hint(s); hint != nullptr) reply->error += std::string(" (") + hint + ")";
  reply->error += "\n";
  if (txn_ != nullptr && !txn_->active()) {
    txn_.reset();
    ++aborts_;
    reply->error += "the transaction is over: later commands commit one by one\n";
  }
}

void Shell::RunOp(const Op& op, ShellReply* reply) {
  if (txn_ != nullptr) {
    std::string out;
    Status s = op(*txn_, &out);
    reply->text += out;
    if (!s.ok()) Fail(s, reply);
    return;
  }
  std::string out;
  const auto start = std::chrono::steady_clock::now();
  Status s = client_->Run([&](client::Transaction& t) {
    out.clear();
    return op(t, &out);
  });
  if (!s.ok()) {
    Fail(s, reply);
    return;
  }
  const uint64_t us = MicrosSince(start);
  ++autocommits_;
  commit_us_last_ = us;
  commit_us_total_ += us;
  if (us > commit_us_max_) commit_us_max_ = us;
  reply->text += out;
}

void Shell::Begin(ShellReply* reply) {
  if (txn_ != nullptr) {
    ++errors_;
    reply->error += "error: a transaction is already open (commit or abort it first)\n";
    return;
  }
  Result<std::unique_ptr<client::Transaction>> t = client_->Begin();
  if (!t.ok()) {
    Fail(t.status(), reply);
    return;
  }
  txn_ = std::move(t).value();
  reply->text += "begun transaction " + std::to_string(txn_->id()) + "\n";
}

void Shell::Commit(ShellReply* reply) {
  if (txn_ == nullptr) {
    ++errors_;
    reply->error += "error: no transaction is open (begin one first)\n";
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  Status s = txn_->Commit();
  const uint64_t us = MicrosSince(start);
  if (!s.ok()) {
    Fail(s, reply);
    txn_.reset();  // a failed commit finishes the transaction
    return;
  }
  txn_.reset();
  ++commits_;
  commit_us_last_ = us;
  commit_us_total_ += us;
  if (us > commit_us_max_) commit_us_max_ = us;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "committed (%.3f ms)\n", static_cast<double>(us) / 1000.0);
  reply->text += buf;
}

void Shell::Abort(ShellReply* reply) {
  if (txn_ == nullptr) {
    ++errors_;
    reply->error += "error: no transaction is open\n";
    return;
  }
  AbortOpen();
  reply->text += "aborted\n";
}

void Shell::Stats(ShellReply* reply) const {
  const uint64_t n = commits_ + autocommits_;
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "session: %llu commands, %llu commits (%llu of them autocommits), %llu aborts, "
                "%llu errors\n"
                "commit latency: last %.3f ms, mean %.3f ms, max %.3f ms\n"
                "transaction: %s\n",
                static_cast<unsigned long long>(commands_), static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(autocommits_),
                static_cast<unsigned long long>(aborts_), static_cast<unsigned long long>(errors_),
                static_cast<double>(commit_us_last_) / 1000.0,
                n == 0 ? 0.0 : static_cast<double>(commit_us_total_) / 1000.0 / static_cast<double>(n),
                static_cast<double>(commit_us_max_) / 1000.0,
                txn_ == nullptr ? "none open" : ("open, id " + std::to_string(txn_->id())).c_str());
  reply->text += buf;
  if (server_stats_) reply->text += server_stats_();
}

ShellReply Shell::Execute(std::string_view line) {
  ShellReply reply;
  const size_t first = line.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || line[first] == '#') return reply;
  Result<std::vector<std::string>> split = SplitShellWords(line);
  if (!split.ok()) {
    ++errors_;
    reply.error = "error: " + std::string(split.status().message()) + "\n";
    return reply;
  }
  const std::vector<std::string>& w = *split;
  if (w.empty()) return reply;
  ++commands_;
  const std::string& cmd = w[0];
  auto usage = [&] {
    ++errors_;
    reply.error = "error: " + Usage(cmd);
    return reply;
  };
  if (cmd == "quit" || cmd == "exit") {
    if (w.size() != 1) return usage();
    if (AbortOpen()) reply.text = "aborted the open transaction\n";
    reply.quit = true;
  } else if (cmd == "help" || cmd == "?") {
    if (w.size() == 1) {
      reply.text = kHelp;
    } else {
      reply.text = Usage(w[1]).substr(7);  // less "usage: "
    }
  } else if (cmd == "begin") {
    if (w.size() != 1) return usage();
    Begin(&reply);
  } else if (cmd == "commit") {
    if (w.size() != 1) return usage();
    Commit(&reply);
  } else if (cmd == "abort" || cmd == "rollback") {
    if (w.size() != 1) return usage();
    Abort(&reply);
  } else if (cmd == "stats") {
    if (w.size() != 1) return usage();
    Stats(&reply);
  } else if (cmd == "get") {
    if (w.size() != 2) return usage();
    RunOp(
        [&](client::Transaction& t, std::string* out) -> Status {
          Result<std::string> v = t.Get(w[1]);
          if (v.status().IsNotFound()) {
            *out = "(not found)\n";
            return Status::OK();
          }
          if (!v.ok()) return v.status();
          *out = QuoteShellWord(*v) + "\n";
          return Status::OK();
        },
        &reply);
  } else if (cmd == "put" || cmd == "set") {
    if (w.size() != 3) return usage();
    RunOp(
        [&](client::Transaction& t, std::string* out) -> Status {
          Status s = t.Put(w[1], w[2]);
          if (s.ok()) *out = "ok\n";
          return s;
        },
        &reply);
  } else if (cmd == "del" || cmd == "delete") {
    if (w.size() != 2) return usage();
    RunOp(
        [&](client::Transaction& t, std::string* out) -> Status {
          Status s = t.Delete(w[1]);
          if (s.ok()) *out = "ok\n";
          return s;
        },
        &reply);
  } else if (cmd == "scan") {
    client::ScanOptions o;
    std::vector<std::string> bounds;
    for (size_t i = 1; i < w.size(); ++i) {
      if (w[i] == "--reverse" || w[i] == "-r") {
        o.reverse = true;
      } else if (w[i] == "--limit" || w[i] == "-n") {
        if (i + 1 == w.size()) return usage();
        const std::string& n = w[++i];
        const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), o.limit);
        if (ec != std::errc() || end != n.data() + n.size()) return usage();
      } else if (bounds.size() < 2) {
        bounds.push_back(w[i]);
      } else {
        return usage();
      }
    }
    if (!bounds.empty() && bounds[0] != "-") o.lower = bounds[0];
    if (bounds.size() > 1 && bounds[1] != "-") o.upper = bounds[1];
    RunOp(
        [&](client::Transaction& t, std::string* out) -> Status {
          size_t n = 0;
          client::ScanIterator it = t.Scan(o);
          for (; it.Valid(); it.Next()) {
            *out += QuoteShellWord(it.key()) + " " + QuoteShellWord(it.value()) + "\n";
            ++n;
          }
          if (!it.status().ok()) return it.status();
          *out += "(" + std::to_string(n) + (n == 1 ? " item)\n" : " items)\n");
          return Status::OK();
        },
        &reply);
  } else {
    ++errors_;
    reply.error = "error: unknown command '" + cmd + "' (help lists the commands)\n";
  }
  return reply;
}

}  // namespace deuteron::cli
