// The TC server on the wire (tc/server/tc_server.h): transactions belong to
// their connection and die with it, and malformed or oversize input costs
// only the connection that sent it, checked with raw bytes on sockets while
// a healthy client keeps being served.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "TransactionService.h"
#include "tests/protocol/wire_util.h"
#include "tests/tc/client/client_harness.h"

namespace deuteron::test {
namespace {

namespace proto = ::deuteron::protocol;
using deuteron::testing::EncodeCall;
using deuteron::testing::Frame;
using deuteron::testing::RawSocket;
using deuteron::testing::Reply;

// Sends one call and reads its reply (null: no reply, the connection
// closed). Decoded in place: the generated *_result types do not move.
// Sends one encoded call and reads its reply (null: no reply, the
// connection closed). Decoded in place: the generated *_result types do not
// move.
template <typename R>
std::unique_ptr<Reply<R>> CallPayload(RawSocket& s, const std::string& call) {
  if (!s.WriteAll(Frame(call))) return nullptr;
  auto payload = s.ReadFrame();
  if (!payload) return nullptr;
  auto buf = std::make_shared<apache::thrift::transport::TMemoryBuffer>(
      reinterpret_cast<uint8_t*>(payload->data()), static_cast<uint32_t>(payload->size()));
  apache::thrift::protocol::TBinaryProtocol p(buf);
  auto r = std::make_unique<Reply<R>>();
  p.readMessageBegin(r->name, r->type, r->seqid);
  if (r->type == apache::thrift::protocol::T_EXCEPTION) {
    r->app.read(&p);
  } else {
    r->result.read(&p);
  }
  return r;
}

template <typename R, typename Args>
std::unique_ptr<Reply<R>> Call(RawSocket& s, const std::string& name, const Args& args) {
  return CallPayload<R>(s, EncodeCall(name, 1, args));
}

int64_t Begin(RawSocket& s) {
  auto r = Call<proto::TransactionService_beginTransaction_result>(
      s, "beginTransaction", proto::TransactionService_beginTransaction_args());
  REQUIRE(r);
  REQUIRE(r->type == apache::thrift::protocol::T_REPLY);
  REQUIRE_FALSE(r->result.__isset.error);
  return r->result.success;
}

// The error code of a put reply (OK when it succeeded).
proto::ErrorCode::type Put(RawSocket& s, int64_t txn, const std::string& key, const std::string& value) {
  proto::TransactionService_put_args args;
  args.txn = txn;
  args.key = key;
  args.value = value;
  auto r = Call<proto::TransactionService_put_result>(s, "put", args);
  REQUIRE(r);
  REQUIRE(r->type == apache::thrift::protocol::T_REPLY);
  return r->result.__isset.error ? r->result.error.code : proto::ErrorCode::OK;
}

template <typename R, typename Args>
proto::ErrorCode::type CodeOf(RawSocket& s, const std::string& name, const Args& args) {
  auto r = Call<R>(s, name, args);
  REQUIRE(r);
  REQUIRE(r->type == apache::thrift::protocol::T_REPLY);
  return r->result.__isset.error ? r->result.error.code : proto::ErrorCode::OK;
}

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A short transaction through the client library: the server still serves.
void CheckServes(ClientHarness& h, const std::string& key) {
  Status s = h.client().Run([&](client::Transaction& t) { return t.Put(key, "ok"); });
  CHECK(s.ok());
}

TEST_CASE("tc server: closing a connection aborts its transactions and frees their locks",
          "[tc_server]") {
  ClientHarness h(ClientMode::kRemote);
  RawSocket raw = RawSocket::Connect(h.port());
  REQUIRE(raw.valid());
  const int64_t id = Begin(raw);
  REQUIRE(Put(raw, id, "k", "from the raw connection") == proto::ErrorCode::OK);
  CHECK(h.server().open_transactions() == 1);
  raw.Close();
  CHECK(WaitFor([&] { return h.server().open_transactions() == 0; }));

  auto t = h.client().Begin();
  REQUIRE(t.ok());
  const auto start = std::chrono::steady_clock::now();
  CHECK((*t)->Get("k").status().IsNotFound());  // never committed, lock released
  CHECK(std::chrono::steady_clock::now() - start < ClientHarness::kLockTimeout / 2);
  REQUIRE((*t)->Commit().ok());
}

TEST_CASE("tc server: a connection idle past the timeout is closed, its transactions aborted",
          "[tc_server]") {
  tc::TcServerOptions o;
  o.idle_timeout = std::chrono::milliseconds(300);
  ClientHarness h(ClientMode::kRemote, o);
  RawSocket raw = RawSocket::Connect(h.port());
  REQUIRE(raw.valid());
  const int64_t id = Begin(raw);
  REQUIRE(Put(raw, id, "k", "v") == proto::ErrorCode::OK);
  CHECK(raw.WaitClosed(5000));
  CHECK(WaitFor([&] { return h.server().open_transactions() == 0; }));
  CheckServes(h, "k");
}

TEST_CASE("tc server: transaction ids are the connection's own", "[tc_server]") {
  tc::TcServerOptions o;
  o.service.max_open_transactions = 2;
  ClientHarness h(ClientMode::kRemote, o);
  RawSocket a = RawSocket::Connect(h.port());
  RawSocket b = RawSocket::Connect(h.port());
  REQUIRE(a.valid());
  REQUIRE(b.valid());
  const int64_t id = Begin(a);
  // Another connection cannot use it.
  CHECK(Put(b, id, "k", "v") == proto::ErrorCode::UNKNOWN_TRANSACTION);
  CHECK(Put(b, id + 1000, "k", "v") == proto::ErrorCode::UNKNOWN_TRANSACTION);
  // Finished: TRANSACTION_FINISHED, and abort stays idempotent.
  proto::TransactionService_commit_args commit;
  commit.txn = id;
  CHECK(CodeOf<proto::TransactionService_commit_result>(a, "commit", commit) == proto::ErrorCode::OK);
  CHECK(Put(a, id, "k", "v") == proto::ErrorCode::TRANSACTION_FINISHED);
  CHECK(CodeOf<proto::TransactionService_commit_result>(a, "commit", commit) ==
        proto::ErrorCode::TRANSACTION_FINISHED);
  proto::TransactionService_abort_args abort;
  abort.txn = id;
  CHECK(CodeOf<proto::TransactionService_abort_result>(a, "abort", abort) == proto::ErrorCode::OK);
  // At most two open on one connection; others are not affected.
  Begin(a);
  Begin(a);
  CHECK(CodeOf<proto::TransactionService_beginTransaction_result>(
            a, "beginTransaction", proto::TransactionService_beginTransaction_args()) ==
        proto::ErrorCode::BUSY);
  Begin(b);
}

TEST_CASE("tc server: execute runs operations as one transaction", "[tc_server]") {
  ClientHarness h(ClientMode::kRemote);
  RawSocket raw = RawSocket::Connect(h.port());
  REQUIRE(raw.valid());
  auto op = [](proto::TcOpKind::type kind, const std::string& key, const std::string& value = "") {
    proto::TcOp o;
    o.__set_kind(kind);
    o.__set_key(key);
    o.__set_value(value);
    return o;
  };
  proto::ExecuteRequest req;
  req.ops.push_back(op(proto::TcOpKind::PUT, "a", "1"));
  req.ops.push_back(op(proto::TcOpKind::PUT, "b", "2"));
  req.ops.push_back(op(proto::TcOpKind::GET, "a"));
  req.ops.push_back(op(proto::TcOpKind::REMOVE, "b"));
  proto::TcOp scan = op(proto::TcOpKind::SCAN, "");
  scan.__set_scan(proto::ScanRequest());
  req.ops.push_back(scan);
  proto::TransactionService_execute_args args;
  args.request = req;
  auto r = Call<proto::TransactionService_execute_result>(raw, "execute", args);
  REQUIRE(r);
  REQUIRE_FALSE(r->result.__isset.error);
  const auto& results = r->result.success.results;
  REQUIRE(results.size() == 5);
  CHECK(results[2].found);
  CHECK(results[2].value == "1");
  REQUIRE(results[4].page.items.size() == 1);  // b deleted in the same transaction
  CHECK(results[4].page.items[0].key == "a");

  // A failing operation aborts all of it, and says which one failed.
  // (An unknown kind is patched into the encoded bytes: the generated types
  // cannot hold one.)
  proto::ExecuteRequest bad;
  bad.ops.push_back(op(proto::TcOpKind::PUT, "c", "3"));
  bad.ops.push_back(op(proto::TcOpKind::GET, "x"));
  args.request = bad;
  std::string call = EncodeCall("execute", 1, args);
  REQUIRE(deuteron::testing::ReplaceOnce(&call, std::string("\x08\x00\x01\x00\x00\x00\x01", 7),
                                         std::string("\x08\x00\x01\x00\x00\x00\x63", 7)));
  r = CallPayload<proto::TransactionService_execute_result>(raw, call);
  REQUIRE(r);
  REQUIRE(r->result.__isset.error);
  CHECK(r->result.error.code == proto::ErrorCode::INVALID_ARGUMENT);
  CHECK(r->result.error.message.find("operation 1") != std::string::npos);
  auto t = h.client().Begin();
  REQUIRE(t.ok());
  CHECK((*t)->Get("c").status().IsNotFound());
  auto a = (*t)->Get("a");
  REQUIRE(a.ok());
  CHECK(*a == "1");
  REQUIRE((*t)->Commit().ok());
}

// After bad input: true when the server answered with an error (a typed
// DeuteronError or a TApplicationException) or closed the connection.
bool ErrorOrClosed(RawSocket& s) {
  auto payload = s.ReadFrame();
  if (!payload) return s.WaitClosed(1000);  // no reply: it must have closed
  auto buf = std::make_shared<apache::thrift::transport::TMemoryBuffer>(
      reinterpret_cast<uint8_t*>(payload->data()), static_cast<uint32_t>(payload->size()));
  apache::thrift::protocol::TBinaryProtocol p(buf);
  std::string name;
  apache::thrift::protocol::TMessageType type;
  int32_t seqid = 0;
  p.readMessageBegin(name, type, seqid);
  if (type == apache::thrift::protocol::T_EXCEPTION) return true;
  // Every method's result struct holds the DeuteronError in field 1.
  proto::TransactionService_beginTransaction_result result;
  result.read(&p);
  return result.__isset.error;
}

TEST_CASE("tc server: malformed and oversize requests cost only their connection", "[tc_server]") {
  tc::TcServerOptions o;
  o.max_frame_size = 1 << 20;
  o.request_memory_limit = 4 << 20;
  o.string_limit = 4096;
  o.container_limit = 100;
  ClientHarness h(ClientMode::kRemote, o);
  auto fresh = [&] {
    RawSocket s = RawSocket::Connect(h.port());
    REQUIRE(s.valid());
    return s;
  };

  SECTION("a frame over the limit: an error, then the connection closes") {
    RawSocket s = fresh();
    REQUIRE(s.WriteAll(std::string("\x00\x20\x00\x00", 4)));  // 2 MiB announced
    CHECK(ErrorOrClosed(s));
    CHECK(s.WaitClosed());
  }
  SECTION("a negative frame length: an error, then the connection closes") {
    RawSocket s = fresh();
    REQUIRE(s.WriteAll(std::string("\xff\xff\xff\xf0", 4) + "junk"));
    CHECK(ErrorOrClosed(s));
    CHECK(s.WaitClosed());
  }
  SECTION("a payload that is no Thrift message") {
    RawSocket s = fresh();
    REQUIRE(s.WriteAll(Frame("this is not thrift")));
    CHECK(ErrorOrClosed(s));
  }
  SECTION("a message cut short") {
    RawSocket s = fresh();
    proto::TransactionService_put_args put;
    put.txn = 1;
    put.key = "key";
    put.value = "value";
    std::string p = EncodeCall("put", 2, put);
    p.resize(p.size() - 6);
    REQUIRE(s.WriteAll(Frame(p)));
    CHECK(ErrorOrClosed(s));
  }
  SECTION("a string over the limit") {
    RawSocket s = fresh();
    const int64_t id = Begin(s);
    proto::TransactionService_put_args put;
    put.txn = id;
    put.key = "k";
    put.value = std::string(8192, 'v');
    REQUIRE(s.WriteAll(Frame(EncodeCall("put", 2, put))));
    CHECK(ErrorOrClosed(s));
  }
  SECTION("a list over the limit") {
    RawSocket s = fresh();
    proto::ExecuteRequest req;
    req.ops.resize(101);
    for (auto& op : req.ops) op.__set_kind(proto::TcOpKind::GET);
    proto::TransactionService_execute_args args;
    args.request = req;
    REQUIRE(s.WriteAll(Frame(EncodeCall("execute", 3, args))));
    CHECK(ErrorOrClosed(s));
  }
  SECTION("an unknown method: an error reply, the connection stays") {
    RawSocket s = fresh();
    auto r = Call<proto::TransactionService_beginTransaction_result>(
        s, "launchMissiles", proto::TransactionService_beginTransaction_args());
    REQUIRE(r);
    CHECK(r->type == apache::thrift::protocol::T_EXCEPTION);
    CHECK(r->app.getType() == apache::thrift::TApplicationException::UNKNOWN_METHOD);
    CHECK(Begin(s) > 0);
  }
  SECTION("a key over the TC's limit: TOO_LARGE, the transaction stays") {
    RawSocket s = fresh();
    const int64_t id = Begin(s);
    CHECK(Put(s, id, std::string(2048, 'k'), "v") == proto::ErrorCode::TOO_LARGE);
    CHECK(Put(s, id, "k", "v") == proto::ErrorCode::OK);
  }
  CheckServes(h, "healthy");
}

TEST_CASE("tc server: with a shared secret, only clients that present it are served", "[tc_server]") {
  tc::TcServerOptions o;
  o.shared_secret = "sesame";
  ClientHarness h(ClientMode::kRemote, o, "sesame");
  CheckServes(h, "k");
  client::RemoteOptions wrong;
  wrong.secret = "open barley";
  const std::string address = "127.0.0.1:" + std::to_string(h.port());
  auto c = client::Client::Connect(address, wrong);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kUnauthenticated);
  auto none = client::Client::Connect(address);  // connects; the first call is refused
  if (none.ok()) {
    auto t = (*none)->Begin();
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().code() == Code::kUnauthenticated);
  } else {
    CHECK(none.status().code() == Code::kUnauthenticated);
  }
  CheckServes(h, "k2");
}

}  // namespace
}  // namespace deuteron::test
