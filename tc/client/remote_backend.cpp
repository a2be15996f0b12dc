// The remote connection: TransactionService calls (protocol/protocol.md,
// "The TC service") over framed binary Thrift on TCP. A transaction holds
// one connection from Begin until it finishes (the server ties transactions
// to connections), then gives it back to a small idle pool. A connection
// that failed at the transport level is dropped: the server aborts what it
// held open when it sees the close.
#include <fmt/format.h>
#include <thrift/TApplicationException.h>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "TransactionService.h"
#include "protocol/errors.h"
#include "tc/client/backend.h"

namespace deuteron::client::detail {
namespace {

namespace proto = ::deuteron::protocol;
namespace thrift = ::apache::thrift;
using thrift::TApplicationException;
using thrift::protocol::TBinaryProtocol;
using thrift::transport::TFramedTransport;
using thrift::transport::TSocket;
using thrift::transport::TTransportException;

// Errors after which the transaction is still active on the server.
bool KeepsTransaction(const Status& s) {
  switch (s.code()) {
    case Code::kTooLarge:
    case Code::kInvalidArgument:
    case Code::kNotFound:
      return true;
    default:
      return false;
  }
}

// One TCP connection and its generated client. Used by one thread at a time.
class Conn {
 public:
  Conn(const std::string& host, uint16_t port, const RemoteOptions& o) {
    const int max_frame =
        o.max_frame_size > INT_MAX - 1024 ? INT_MAX : static_cast<int>(o.max_frame_size);
    auto config = std::make_shared<thrift::TConfiguration>(max_frame, max_frame);
    socket_ = std::make_shared<TSocket>(host, port, config);
    socket_->setConnTimeout(o.connect_timeout_ms);
    socket_->setSendTimeout(o.send_timeout_ms);
    socket_->setRecvTimeout(o.recv_timeout_ms);
    socket_->setNoDelay(true);
    framed_ = std::make_shared<TFramedTransport>(socket_, config);
    // Replies are read strictly; no string or list may claim more than a frame.
    const auto limit = static_cast<int32_t>(max_frame);
    auto prot = std::make_shared<TBinaryProtocol>(framed_, limit, limit, true, true);
    client_ = std::make_unique<proto::TransactionServiceClient>(prot);
  }
  ~Conn() {
    try {
      framed_->close();
    } catch (...) {  // dropping it anyway
    }
  }

  void Open() { framed_->open(); }

  // False when the peer closed an idle connection (idle timeout, restart)
  // or sent bytes nobody asked for: one nonblocking peek.
  bool LooksAlive() {
    if (!socket_->isOpen()) return false;
    char byte;
    const ssize_t n = ::recv(socket_->getSocketFD(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  // Runs one call; maps every exception to a Status. A transport failure
  // marks the connection broken.
  template <typename F>
  Status Call(const char* method, F&& f) {
    try {
      f(*client_);
      return Status::OK();
    } catch (const proto::DeuteronError& e) {
      return proto::FromDeuteronError(e);
    } catch (const TApplicationException& e) {
      return proto::FromApplicationException(e, method);
    } catch (const TTransportException& e) {
      broken_ = true;
      return proto::FromTransportException(e, method);
    } catch (const std::exception& e) {  // a reply we cannot decode
      broken_ = true;
      return Status::IOError(fmt::format("{}: {}", method, e.what()));
    }
  }

  bool broken() const { return broken_; }

 private:
  std::shared_ptr<TSocket> socket_;
  std::shared_ptr<TFramedTransport> framed_;
  std::unique_ptr<proto::TransactionServiceClient> client_;
  bool broken_ = false;
};

class RemoteClient;

class RemoteTxn final : public TxnBackend {
 public:
  RemoteTxn(RemoteClient* client, std::unique_ptr<Conn> conn, int64_t id, uint32_t page)
      : client_(client), conn_(std::move(conn)), id_(id), page_(page) {}
  ~RemoteTxn() override { Abort(); }

  uint64_t id() const override { return static_cast<uint64_t>(id_); }
  bool active() const override { return conn_ != nullptr; }

  Result<std::string> Get(std::string_view key) override {
    RETURN_IF_ERROR(CheckActive());
    proto::TcReadResult r;
    const std::string k(key);
    RETURN_IF_ERROR(After(conn_->Call("get", [&](auto& c) { c.get(r, id_, k); })));
    if (!r.found) return Status::NotFound("no such key");
    return std::move(r.value);
  }

  Status Put(std::string_view key, std::string_view value) override {
    RETURN_IF_ERROR(CheckActive());
    const std::string k(key), v(value);
    return After(conn_->Call("put", [&](auto& c) { c.put(id_, k, v); }));
  }

  Status Delete(std::string_view key) override {
    RETURN_IF_ERROR(CheckActive());
    const std::string k(key);
    return After(conn_->Call("remove", [&](auto& c) { c.remove(id_, k); }));
  }

  Result<Page> ScanPage(const ScanOptions& o) override {
    RETURN_IF_ERROR(CheckActive());
    proto::ScanRequest req;
    if (o.lower) req.__set_lower(*o.lower);
    req.__set_lower_inclusive(o.lower_inclusive);
    if (o.upper) req.__set_upper(*o.upper);
    req.__set_upper_inclusive(o.upper_inclusive);
    req.__set_reverse(o.reverse);
    req.__set_limit(static_cast<int32_t>(std::min<uint32_t>(page_, INT32_MAX)));
    proto::TcScanPage w;
    RETURN_IF_ERROR(After(conn_->Call("scan", [&](auto& c) { c.scan(w, id_, req); })));
    Page page;
    page.items.reserve(w.items.size());
    for (proto::KeyValue& kv : w.items) page.items.emplace_back(std::move(kv.key), std::move(kv.value));
    page.more = w.more;
    page.resume_key = std::move(w.resume_key);
    if (page.more && page.items.empty()) {
      return Status::Internal("scan: the server said more but sent an empty page");
    }
    return page;
  }

  Status Commit() override {
    RETURN_IF_ERROR(CheckActive());
    Status s = conn_->Call("commit", [&](auto& c) { c.commit(id_); });
    Finish();
    return s;
  }

  void Abort() override {
    if (!active()) return;
    conn_->Call("abort", [&](auto& c) { c.abort(id_); }).PermitUncheckedError();
    Finish();
  }

 private:
  Status CheckActive() const {
    if (!active()) return Status::TransactionFinished(fmt::format("transaction {} is finished", id_));
    return Status::OK();
  }
  // After a call: a failure that ended the transaction on the server (a
  // lock failure aborts it) finishes it here too.
  Status After(Status s) {
    if (s.ok() || KeepsTransaction(s)) return s;
    Abort();  // drops the server's entry (or the broken connection)
    return s;
  }
  void Finish();

  RemoteClient* const client_;
  std::unique_ptr<Conn> conn_;  // null once finished
  const int64_t id_;
  const uint32_t page_;
};

class RemoteClient final : public ClientBackend {
 public:
  RemoteClient(std::string host, uint16_t port, RemoteOptions options)
      : host_(std::move(host)), port_(port), options_(std::move(options)) {}

  Result<std::unique_ptr<Conn>> Acquire() {
    {
      std::lock_guard<std::mutex> l(mu_);
      while (!idle_.empty()) {
        std::unique_ptr<Conn> conn = std::move(idle_.back());
        idle_.pop_back();
        if (conn->LooksAlive()) return conn;
      }
    }
    auto conn = std::make_unique<Conn>(host_, port_, options_);
    try {
      conn->Open();
    } catch (const TTransportException& e) {
      return Status::Unavailable(fmt::format("connect to {}:{}: {}", host_, port_, e.what()));
    }
    if (!options_.secret.empty()) {
      RETURN_IF_ERROR(
          conn->Call("authenticate", [&](auto& c) { c.authenticate(options_.secret); }));
    }
    return conn;
  }

  void Release(std::unique_ptr<Conn> conn) {
    if (conn->broken()) return;
    std::lock_guard<std::mutex> l(mu_);
    if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(conn));
  }

  Result<std::unique_ptr<TxnBackend>> Begin() override {
    ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, Acquire());
    int64_t id = 0;
    Status s = conn->Call("beginTransaction", [&](auto& c) { id = c.beginTransaction(); });
    if (!s.ok()) {
      Release(std::move(conn));
      return s;
    }
    return std::unique_ptr<TxnBackend>(new RemoteTxn(this, std::move(conn), id, options_.scan_page));
  }

  Status Close() override {
    std::lock_guard<std::mutex> l(mu_);
    idle_.clear();
    return Status::OK();
  }

 private:
  const std::string host_;
  const uint16_t port_;
  const RemoteOptions options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> idle_;  // GUARDED_BY(mu_)
};

void RemoteTxn::Finish() { client_->Release(std::move(conn_)); }

}  // namespace

Result<std::unique_ptr<ClientBackend>> ConnectRemoteBackend(const std::string& host, uint16_t port,
                                                            const RemoteOptions& options) {
  auto client = std::make_unique<RemoteClient>(host, port, options);
  ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, client->Acquire());
  client->Release(std::move(conn));
  return std::unique_ptr<ClientBackend>(std::move(client));
}

}  // namespace deuteron::client::detail
