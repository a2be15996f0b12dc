#include "tc/cli/cli_options.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>
#include <string_view>

#include "common/env.h"

namespace deuteron::cli {
namespace {

// Splits "512MiB" into 512 and "MiB". False unless it starts with digits.
bool SplitNumber(std::string_view text, uint64_t* number, std::string_view* unit) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *number);
  if (ec != std::errc() || end == text.data()) return false;
  *unit = text.substr(static_cast<size_t>(end - text.data()));
  while (!unit->empty() && unit->front() == ' ') unit->remove_prefix(1);
  return true;
}

bool Multiply(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

std::string FormatDuration(std::chrono::milliseconds d) {
  const int64_t ms = d.count();
  if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms != 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// The subcommand being parsed when an error came: the last one given.
std::string CommandName(const CLI::App& app) {
  std::string name = "deuteron";
  const CLI::App* at = &app;
  for (;;) {
    std::vector<const CLI::App*> given = at->get_subcommands([](const CLI::App* s) { return s->parsed(); });
    if (given.empty()) break;
    at = given.back();
    name += " " + at->get_name();
  }
  return name;
}

// Wraps `text` at `width` columns (its own newlines kept).
std::string Wrap(const std::string& text, size_t width) {
  std::string out, line;
  auto flush_line = [&] {
    if (!out.empty()) out += '\n';
    out += line;
    line.clear();
  };
  size_t i = 0;
  while (i <= text.size()) {
    const size_t nl = std::min(text.find('\n', i), text.size());
    std::string_view para(text.data() + i, nl - i);
    size_t p = 0;
    while (p < para.size()) {
      size_t sp = para.find(' ', p);
      if (sp == std::string_view::npos) sp = para.size();
      const std::string_view word = para.substr(p, sp - p);
      if (!line.empty() && line.size() + 1 + word.size() > width) flush_line();
      if (!line.empty()) line += ' ';
      line += word;
      p = sp + 1;
    }
    flush_line();
    i = nl + 1;
  }
  return out;
}

// The common help layout: descriptions wrapped to the terminal's usual 100
// columns, subcommands listed by the first sentence of their description.
class HelpFormatter : public CLI::Formatter {
 public:
  static constexpr size_t kWidth = 100;
  std::string make_option_desc(const CLI::Option* opt) const override {
    return Wrap(CLI::Formatter::make_option_desc(opt), kWidth - get_column_width());
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    std::string d = sub->get_description();
    const size_t stop = d.find(". ");
    if (stop != std::string::npos) d = d.substr(0, stop + 1);
    for (char& c : d) {
      if (c == '\n') c = ' ';
    }
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(), Wrap(d, kWidth - get_column_width()),
                             get_column_width());
    return out.str();
  }
  std::string make_description(const CLI::App* app) const override {
    std::string d = app->get_description();
    for (char& c : d) {
      if (c == '\n') c = ' ';
    }
    return d.empty() ? "" : Wrap(d, kWidth) + "\n\n";
  }
};

}  // namespace

Result<uint64_t> ParseSize(const std::string& text) {
  uint64_t n = 0;
  std::string_view unit;
  if (!SplitNumber(text, &n, &unit)) {
    return Status::InvalidArgument("a size is a whole number with an optional unit (B, KiB, MiB, GiB, TiB), not '" +
                                   text + "'");
  }
  std::string u(unit);
  for (char& c : u) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  uint64_t scale = 0;
  if (u.empty() || u == "b") {
    scale = 1;
  } else if (u == "k" || u == "kb" || u == "kib") {
    scale = uint64_t{1} << 10;
  } else if (u == "m" || u == "mb" || u == "mib") {
    scale = uint64_t{1} << 20;
  } else if (u == "g" || u == "gb" || u == "gib") {
    scale = uint64_t{1} << 30;
  } else if (u == "t" || u == "tb" || u == "tib") {
    scale = uint64_t{1} << 40;
  } else {
    return Status::InvalidArgument("unknown size unit '" + std::string(unit) + "' in '" + text +
                                   "' (B, KiB, MiB, GiB, TiB)");
  }
  uint64_t bytes = 0;
  if (!Multiply(n, scale, &bytes)) return Status::InvalidArgument("size '" + text + "' is too large");
  return bytes;
}

Result<std::chrono::microseconds> ParseDuration(const std::string& text,
                                                std::chrono::microseconds bare_unit) {
  uint64_t n = 0;
  std::string_view unit;
  if (!SplitNumber(text, &n, &unit)) {
    return Status::InvalidArgument("a duration is a whole number with an optional unit (us, ms, s, m, h, d), not '" +
                                   text + "'");
  }
  uint64_t scale = 0;
  if (unit.empty()) {
    scale = static_cast<uint64_t>(bare_unit.count());
  } else if (unit == "us") {
    scale = 1;
  } else if (unit == "ms") {
    scale = 1000;
  } else if (unit == "s") {
    scale = 1'000'000;
  } else if (unit == "m" || unit == "min") {
    scale = 60'000'000;
  } else if (unit == "h") {
    scale = 3'600'000'000;
  } else if (unit == "d") {
    scale = 86'400'000'000;
  } else {
    return Status::InvalidArgument("unknown duration unit '" + std::string(unit) + "' in '" + text +
                                   "' (us, ms, s, m, h, d)");
  }
  uint64_t us = 0;
  if (!Multiply(n, scale, &us) || us > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::InvalidArgument("duration '" + text + "' is too long");
  }
  return std::chrono::microseconds(static_cast<int64_t>(us));
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || bytes % (uint64_t{1} << (10 * u)) == 0) {
    if (u != 0) {
      std::snprintf(buf, sizeof(buf), "%llu %s", static_cast<unsigned long long>(bytes >> (10 * u)), kUnits[u]);
      return buf;
    }
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, kUnits[u]);
  }
  return buf;
}

Result<HostPort> ParseHostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  uint64_t port = 0;
  std::string_view digits;
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() ||
      !SplitNumber(std::string_view(text).substr(colon + 1), &port, &digits) || !digits.empty() ||
      port > 65535) {
    return Status::InvalidArgument("HOST:PORT expected (port 0-65535), not '" + text + "'");
  }
  HostPort hp;
  hp.host = text.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  if (hp.host.empty()) return Status::InvalidArgument("HOST:PORT expected, not '" + text + "'");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

void ConfigureApp(CLI::App& app, const std::string& version) {
  app.set_version_flag("--version", "deuteron " + version);
  auto formatter = std::make_shared<HelpFormatter>();
  formatter->column_width(34);
  formatter->label("REQUIRED", "(required)");
  formatter->label("Usage", "usage");
  app.formatter(formatter);
  app.option_defaults()->always_capture_default();
  app.fallthrough(false);
}

int ParseAndRun(CLI::App& app, const Runner& runner, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string name = CommandName(app);
    std::fprintf(stderr, "%s: %s (see '%s --help')\n", name.c_str(), e.what(), name.c_str());
    return 2;
  }
  if (!runner.set()) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  return runner.Run();
}

CLI::Option* AddSizeOption(CLI::App* cmd, const std::string& name, uint64_t* target,
                           const std::string& help) {
  CLI::Option* o = cmd->add_option_function<std::string>(
      name,
      [target, name](const std::string& text) {
        Result<uint64_t> r = ParseSize(text);
        if (!r.ok()) throw CLI::ValidationError(name, std::string(r.status().message()));
        *target = *r;
      },
      help);
  o->type_name("SIZE");
  o->default_str(*target == 0 ? "0" : FormatSize(*target));
  return o;
}

CLI::Option* AddDurationOption(CLI::App* cmd, const std::string& name,
                               std::chrono::milliseconds* target,
                               std::chrono::milliseconds bare_unit, const std::string& help) {
  CLI::Option* o = cmd->add_option_function<std::string>(
      name,
      [target, name, bare_unit](const std::string& text) {
        Result<std::chrono::microseconds> r = ParseDuration(text, bare_unit);
        if (!r.ok()) throw CLI::ValidationError(name, std::string(r.status().message()));
        *target = std::chrono::duration_cast<std::chrono::milliseconds>(*r);
      },
      help);
  o->type_name("DURATION");
  o->default_str(FormatDuration(*target));
  return o;
}

CLI::Option* AddAddressOption(CLI::App* cmd, const std::string& name, HostPort* target,
                              const std::string& help) {
  CLI::Option* o = cmd->add_option_function<std::string>(
      name,
      [target, name](const std::string& text) {
        Result<HostPort> r = ParseHostPort(text);
        if (!r.ok()) throw CLI::ValidationError(name, std::string(r.status().message()));
        *target = *r;
      },
      help);
  o->type_name("HOST:PORT");
  if (!target->host.empty()) o->default_str(target->ToString());
  return o;
}

Result<std::string> LoadSecret(const std::string& path) {
  if (path.empty()) {
    const char* env = std::getenv("DEUTERON_SECRET");
    return std::string(env == nullptr ? "" : env);
  }
  Result<std::string> read = ReadFileToString(Env::Posix(), path);
  if (!read.ok()) return Status::InvalidArgument("--secret-file " + path + ": " + read.status().ToString());
  std::string secret = std::move(read).value();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) return Status::InvalidArgument("--secret-file " + path + " is empty");
  return secret;
}

void UsageError(const std::string& reason) { throw CLI::ValidationError(reason); }

Status CheckStoreDir(const std::string& dir, StoreKind want) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::OK();  // made by the server (or its error)
  auto has = [&dir](const char* name) {
    std::error_code e;
    return fs::exists(fs::path(dir) / name, e);
  };
  const bool dc_store = has("IDENTITY") || has("lss") || has("dc.meta");
  const bool tc_store = has("log");
  const bool serve_store = tc_store && has("dc");
  if (want == StoreKind::kDc && (tc_store || has("dc"))) {
    return Status::InvalidArgument(dir + " holds a " + (serve_store ? "`serve`" : "`tc`") +
                                   " store (log/), not a DC's: `deuteron dc` serves a DC directory (for a serve "
                                   "store, its dc/)");
  }
  if (want != StoreKind::kDc && dc_store) {
    return Status::InvalidArgument(dir + " holds a `deuteron dc` store (IDENTITY, lss/), not a " +
                                   (want == StoreKind::kServe ? "`serve`" : "`tc`") + " store");
  }
  if (want == StoreKind::kTc && has("dc")) {
    return Status::InvalidArgument(dir + " holds a `serve` store (log/ and dc/): open it with `deuteron serve`");
  }
  if (dc_store || tc_store || has("dc") || has("LOCK")) return Status::OK();
  if (fs::directory_iterator(dir, ec) != fs::directory_iterator()) {
    return Status::InvalidArgument(dir + " is not empty and holds no Deuteron store: give an empty or new directory");
  }
  return Status::OK();
}

CLI::Validator Within(uint64_t lo, uint64_t hi) {
  CLI::Validator v = CLI::Range(lo, hi);
  v.description("");
  return v;
}

}  // namespace deuteron::cli
