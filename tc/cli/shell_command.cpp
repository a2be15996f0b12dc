#include "tc/cli/shell_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <editline/readline.h>
#include <thrift/TOutput.h>

#include "common/logging.h"
#include "common/status.h"
#include "tc/cli/cli_options.h"
#include "tc/cli/shell.h"
#include "tc/client/client.h"

namespace deuteron::cli {
namespace {

constexpr const char* kDescription =
    "An interactive prompt for transactions against a TC server (--connect) or an\n"
    "embedded store in a directory (--dir): begin, get, put, del, scan, commit,\n"
    "abort, stats, help. Outside a transaction each command commits at once.\n"
    "With a script on standard input it runs each line and prints only results\n"
    "(exit status 1 if any command failed).";

std::string HistoryPath() {
  if (const char* p = std::getenv("DEUTERON_HISTORY"); p != nullptr) return p;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.deuteron_history";
  }
  return "";
}

void Show(const ShellReply& r) {
  std::fputs(r.text.c_str(), stdout);
  std::fflush(stdout);
  if (!r.error.empty()) {
    std::fputs(r.error.c_str(), stderr);
    std::fflush(stderr);
  }
}

int Interactive(Shell* shell, const std::string& where) {
  std::printf("deuteron shell: %s. Type help for the commands, Ctrl-D to leave.\n", where.c_str());
  std::fflush(stdout);
  rl_readline_name = "deuteron";
  const std::string history = HistoryPath();
  if (!history.empty()) read_history(history.c_str());
  stifle_history(1000);
  while (true) {
    const std::string prompt = shell->Prompt();
    char* raw = readline(prompt.c_str());
    if (raw == nullptr) {  // end of input
      std::printf("\n");
      break;
    }
    const std::string line = raw;
    std::free(raw);
    if (line.find_first_not_of(" \t") != std::string::npos) add_history(line.c_str());
    const ShellReply r = shell->Execute(line);
    Show(r);
    if (r.quit) break;
  }
  if (shell->AbortOpen()) std::printf("aborted the open transaction\n");
  if (!history.empty()) write_history(history.c_str());
  return 0;
}

int Script(Shell* shell) {
  bool failed = false;
  std::string line;
  while (std::getline(std::cin, line)) {
    const ShellReply r = shell->Execute(line);
    Show(r);
    failed = failed || !r.error.empty();
    if (r.quit) break;
  }
  if (shell->AbortOpen()) std::fputs("aborted the open transaction at end of input\n", stderr);
  return failed ? 1 : 0;
}

struct ShellArgs {
  std::string address, dir, secret_file;
};

int RunShell(const ShellArgs& a) {
  const std::string& address = a.address;
  const std::string& dir = a.dir;
  // Thrift's own lines about refused connections would repeat our errors.
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
  std::string where;
  client::RemoteOptions remote;
  if (!address.empty()) {
    Result<std::string> secret = LoadSecret(a.secret_file);
    if (!secret.ok()) {
      std::fprintf(stderr, "deuteron shell: %s\n", secret.status().ToString().c_str());
      return 2;
    }
    remote.secret = std::move(secret).value();
    where = "connected to " + address;
  } else {
    where = "opened " + dir + " (embedded)";
    // The store's own info lines would clutter the session.
    if (std::getenv("DEUTERON_LOG") == nullptr) SetLogLevel(LogLevel::kWarn);
  }
  Result<std::unique_ptr<client::Client>> c = address.empty()
                                                  ? client::Client::OpenEmbedded(dir)
                                                  : client::Client::Connect(address, remote);
  if (!c.ok()) {
    std::fprintf(stderr, "deuteron shell: %s %s: %s\n", address.empty() ? "open" : "connect to",
                 address.empty() ? dir.c_str() : address.c_str(), c.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<client::Client> client = std::move(c).value();
  int rc = 0;
  {
    Shell shell(client.get());
    rc = isatty(STDIN_FILENO) ? Interactive(&shell, where) : Script(&shell);
  }
  if (Status s = client->Close(); !s.ok()) {
    std::fprintf(stderr, "deuteron shell: close: %s\n", s.ToString().c_str());
    return 1;
  }
  return rc;
}

}  // namespace

void AddShellCommand(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<ShellArgs>();
  CLI::App* cmd = app.add_subcommand("shell", kDescription);
  auto* connect = cmd->add_option("--connect", a->address, "the TC server's HOST:PORT")->type_name("HOST:PORT");
  auto* dir_opt =
      cmd->add_option("--dir", a->dir, "an embedded store's directory (created if absent)")->type_name("DIR");
  connect->excludes(dir_opt);
  cmd->add_option("--secret-file", a->secret_file, "the server's shared secret (else $DEUTERON_SECRET)")
      ->check(CLI::ExistingFile)
      ->type_name("PATH");
  cmd->callback([a, &runner] {
    if (a->address.empty() == a->dir.empty()) UsageError("give --connect HOST:PORT or --dir DIR");
    runner.Set([a] { return RunShell(*a); });
  });
}

}  // namespace deuteron::cli
