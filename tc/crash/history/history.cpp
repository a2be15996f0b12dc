// History: recording, and the JSON-lines form (history.md).
#include "tc/crash/history/history.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>
#include <variant>

#include "common/json.h"

namespace deuteron::crash {

HistoryOp HistoryOp::Append(std::string key, uint64_t value) {
  HistoryOp op;
  op.kind = Kind::kAppend;
  op.key = std::move(key);
  op.value = value;
  return op;
}

HistoryOp HistoryOp::Read(std::string key, std::optional<std::vector<uint64_t>> list) {
  HistoryOp op;
  op.kind = Kind::kRead;
  op.key = std::move(key);
  op.read = std::move(list);
  return op;
}

std::string_view OutcomeName(TxnOutcome outcome) {
  switch (outcome) {
    case TxnOutcome::kOk: return "ok";
    case TxnOutcome::kFail: return "fail";
    case TxnOutcome::kInfo: return "info";
  }
  return "?";
}

History::History() : epoch_(std::chrono::steady_clock::now()) {}

int64_t History::Now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now() - epoch_)
      .count();
}

void History::Add(HistoryTxn txn) {
  std::lock_guard<std::mutex> lock(mu_);
  txns_.push_back(std::move(txn));
}

size_t History::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return txns_.size();
}

namespace {

// A small JSON reader for the history's lines: objects, arrays, strings,
// integers, null, true and false (no fractions: the format has none).
struct JsonValue;
using JsonArray = std::vector<JsonValue>;
using JsonObject = std::vector<std::pair<std::string, JsonValue>>;
struct JsonValue {
  std::variant<std::monostate, bool, int64_t, uint64_t, std::string, JsonArray, JsonObject> v;
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  Result<JsonValue> ReadDocument() {
    JsonValue value;
    RETURN_IF_ERROR(ReadValue(&value, 0));
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 16;

  Status Error(std::string_view what) const {
    return Status::InvalidArgument(std::string(what) + " at column " + std::to_string(pos_ + 1));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n')) ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeWord(std::string_view w) {
    if (s_.substr(pos_, w.size()) == w) {
      pos_ += w.size();
      return true;
    }
    return false;
  }

  Status ReadValue(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return ReadObject(out, depth);
    if (c == '[') return ReadArray(out, depth);
    if (c == '"') {
      std::string str;
      RETURN_IF_ERROR(ReadString(&str));
      out->v = std::move(str);
      return Status::OK();
    }
    if (ConsumeWord("null")) { out->v = std::monostate{}; return Status::OK(); }
    if (ConsumeWord("true")) { out->v = true; return Status::OK(); }
    if (ConsumeWord("false")) { out->v = false; return Status::OK(); }
    if (c == '-' || (c >= '0' && c <= '9')) return ReadNumber(out);
    return Error("unexpected character");
  }

  Status ReadNumber(JsonValue* out) {
    const char* begin = s_.data() + pos_;
    const char* end = s_.data() + s_.size();
    if (*begin == '-') {
      int64_t n = 0;
      auto [p, ec] = std::from_chars(begin, end, n);
      if (ec != std::errc()) return Error("bad number");
      pos_ += static_cast<size_t>(p - begin);
      out->v = n;
    } else {
      uint64_t n = 0;
      auto [p, ec] = std::from_chars(begin, end, n);
      if (ec != std::errc()) return Error("bad number");
      pos_ += static_cast<size_t>(p - begin);
      out->v = n;
    }
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) {
      return Error("fractional numbers are not part of the format");
    }
    return Status::OK();
  }

  Status ReadString(std::string* out) {
    ++pos_;  // the opening quote
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return Status::OK();
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out->push_back(e); break;
        case 'n': out->push_back('\n'); break;
        case 't': out->push_back('\t'); break;
        case 'r': out->push_back('\r'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return Error("bad \\u escape");
          unsigned code = 0;
          auto [p, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, code, 16);
          if (ec != std::errc() || p != s_.data() + pos_ + 4) return Error("bad \\u escape");
          pos_ += 4;
          if (code > 0xff) return Error("\\u escape above \\u00ff (keys are bytes)");
          out->push_back(static_cast<char>(code));
          break;
        }
        default: return Error("bad escape");
      }
    }
    return Error("unterminated string");
  }

  Status ReadArray(JsonValue* out, int depth) {
    ++pos_;
    JsonArray items;
    if (!Consume(']')) {
      for (;;) {
        JsonValue item;
        RETURN_IF_ERROR(ReadValue(&item, depth + 1));
        items.push_back(std::move(item));
        if (Consume(']')) break;
        if (!Consume(',')) return Error("expected ',' or ']'");
      }
    }
    out->v = std::move(items);
    return Status::OK();
  }

  Status ReadObject(JsonValue* out, int depth) {
    ++pos_;
    JsonObject fields;
    if (!Consume('}')) {
      for (;;) {
        SkipSpace();
        if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a field name");
        std::string name;
        RETURN_IF_ERROR(ReadString(&name));
        if (!Consume(':')) return Error("expected ':'");
        JsonValue value;
        RETURN_IF_ERROR(ReadValue(&value, depth + 1));
        fields.emplace_back(std::move(name), std::move(value));
        if (Consume('}')) break;
        if (!Consume(',')) return Error("expected ',' or '}'");
      }
    }
    out->v = std::move(fields);
    return Status::OK();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

const uint64_t* AsUint(const JsonValue& v) { return std::get_if<uint64_t>(&v.v); }

Result<int64_t> AsTime(const JsonValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > static_cast<uint64_t>(INT64_MAX)) return Status::InvalidArgument("time out of range");
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v.v); i != nullptr && *i == -1) return int64_t{-1};
  return Status::InvalidArgument("a time is a whole number of microseconds (or -1)");
}

Result<HistoryOp> OpFromJson(const JsonValue& v) {
  const auto* arr = std::get_if<JsonArray>(&v.v);
  if (arr == nullptr || arr->size() != 3) return Status::InvalidArgument("an op is [f, key, value]");
  const auto* f = std::get_if<std::string>(&(*arr)[0].v);
  const auto* key = std::get_if<std::string>(&(*arr)[1].v);
  if (f == nullptr || key == nullptr) return Status::InvalidArgument("an op's f and key are strings");
  if (*f == "append") {
    const uint64_t* value = AsUint((*arr)[2]);
    if (value == nullptr) return Status::InvalidArgument("an append's value is a whole number");
    return HistoryOp::Append(*key, *value);
  }
  if (*f == "r") {
    if (std::holds_alternative<std::monostate>((*arr)[2].v)) return HistoryOp::Read(*key, std::nullopt);
    const auto* list = std::get_if<JsonArray>(&(*arr)[2].v);
    if (list == nullptr) return Status::InvalidArgument("a read's value is a list or null");
    std::vector<uint64_t> elems;
    elems.reserve(list->size());
    for (const JsonValue& e : *list) {
      const uint64_t* n = AsUint(e);
      if (n == nullptr) return Status::InvalidArgument("a list element is a whole number");
      elems.push_back(*n);
    }
    return HistoryOp::Read(*key, std::move(elems));
  }
  return Status::InvalidArgument("an op's f is \"append\" or \"r\"");
}

}  // namespace

std::string History::ToJson(const HistoryTxn& txn) {
  std::string out = "{\"id\":" + std::to_string(txn.id) + ",\"client\":" + std::to_string(txn.client) +
                    ",\"status\":\"" + std::string(OutcomeName(txn.outcome)) + "\"";
  out += ",\"start\":" + std::to_string(txn.start_us) + ",\"end\":" + std::to_string(txn.end_us);
  out += ",\"ops\":[";
  bool first = true;
  for (const HistoryOp& op : txn.ops) {
    if (!first) out.push_back(',');
    first = false;
    out += op.kind == HistoryOp::Kind::kAppend ? "[\"append\"," : "[\"r\",";
    AppendJsonString(&out, op.key);
    out.push_back(',');
    if (op.kind == HistoryOp::Kind::kAppend) {
      out += std::to_string(op.value);
    } else if (!op.read.has_value()) {
      out += "null";
    } else {
      out.push_back('[');
      for (size_t i = 0; i < op.read->size(); ++i) {
        if (i > 0) out.push_back(',');
        out += std::to_string((*op.read)[i]);
      }
      out.push_back(']');
    }
    out.push_back(']');
  }
  out += "]}";
  return out;
}

Result<HistoryTxn> History::FromJson(std::string_view line) {
  ASSIGN_OR_RETURN(JsonValue doc, JsonReader(line).ReadDocument());
  const auto* obj = std::get_if<JsonObject>(&doc.v);
  if (obj == nullptr) return Status::InvalidArgument("a transaction is a JSON object");
  HistoryTxn txn;
  bool have_id = false, have_status = false, have_ops = false;
  for (const auto& [name, value] : *obj) {
    if (name == "id" || name == "client") {
      const uint64_t* n = AsUint(value);
      if (n == nullptr) return Status::InvalidArgument("\"" + name + "\" is a whole number");
      (name == "id" ? txn.id : txn.client) = *n;
      have_id |= name == "id";
    } else if (name == "status") {
      const auto* s = std::get_if<std::string>(&value.v);
      if (s == nullptr) return Status::InvalidArgument("\"status\" is a string");
      if (*s == "ok") txn.outcome = TxnOutcome::kOk;
      else if (*s == "fail") txn.outcome = TxnOutcome::kFail;
      else if (*s == "info") txn.outcome = TxnOutcome::kInfo;
      else return Status::InvalidArgument("\"status\" is ok, fail or info");
      have_status = true;
    } else if (name == "start" || name == "end") {
      ASSIGN_OR_RETURN(int64_t t, AsTime(value));
      (name == "start" ? txn.start_us : txn.end_us) = t;
    } else if (name == "ops") {
      const auto* ops = std::get_if<JsonArray>(&value.v);
      if (ops == nullptr) return Status::InvalidArgument("\"ops\" is a list");
      for (const JsonValue& o : *ops) {
        ASSIGN_OR_RETURN(HistoryOp op, OpFromJson(o));
        txn.ops.push_back(std::move(op));
      }
      have_ops = true;
    }
    // Other fields are ignored: later writers may add some.
  }
  if (!have_id || !have_status || !have_ops) {
    return Status::InvalidArgument("a transaction needs \"id\", \"status\" and \"ops\"");
  }
  return txn;
}

Status History::Save(const std::string& path) const {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const HistoryTxn& txn : txns_) {
      text += ToJson(txn);
      text.push_back('\n');
    }
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status::FromErrno(errno, path);
  const size_t written = std::fwrite(text.data(), 1, text.size(), f);
  const int write_err = written == text.size() ? 0 : errno;
  if (std::fclose(f) != 0 && write_err == 0) return Status::FromErrno(errno, path);
  if (write_err != 0 || written != text.size()) return Status::FromErrno(write_err != 0 ? write_err : EIO, path);
  return Status::OK();
}

Result<std::unique_ptr<History>> History::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return errno == ENOENT ? Status::NotFound(path) : Status::FromErrno(errno, path);
  }
  auto history = std::make_unique<History>();
  std::string line;
  size_t line_no = 0;
  uint64_t max_id = 0, max_value = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<HistoryTxn> txn = FromJson(line);
    if (!txn.ok()) return txn.status().WithContext(path + ":" + std::to_string(line_no));
    max_id = std::max(max_id, txn->id);
    for (const HistoryOp& op : txn->ops) {
      if (op.kind == HistoryOp::Kind::kAppend) max_value = std::max(max_value, op.value);
    }
    history->txns_.push_back(std::move(*txn));
  }
  if (in.bad()) return Status::IOError(path + ": read failed");
  history->next_id_.store(max_id + 1, std::memory_order_relaxed);
  history->next_value_.store(max_value + 1, std::memory_order_relaxed);
  return history;
}

}  // namespace deuteron::crash
