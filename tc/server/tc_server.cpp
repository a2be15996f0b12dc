#include "tc/server/tc_server.h"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <thrift/TProcessor.h>

#include "TransactionService.h"
#include "protocol/errors.h"
#include "protocol/server/service.h"

namespace deuteron::tc {
namespace {

namespace proto = ::deuteron::protocol;

// The connections' sessions, by the layer's connection id.
class Sessions {
 public:
  explicit Sessions(TcService* service) : service_(service) {}

  void Open(uint64_t connection) {
    std::shared_ptr<TcSession> session = service_->OpenSession();
    std::lock_guard<std::mutex> l(mu_);
    sessions_.emplace(connection, std::move(session));
  }

  void Close(uint64_t connection) {
    std::shared_ptr<TcSession> session;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sessions_.find(connection);
      if (it == sessions_.end()) return;
      session = std::move(it->second);
      sessions_.erase(it);
    }
    session->Close();  // aborts its transactions
  }

  // The session of the call in progress on this thread; throws when there
  // is none (a call outside a served connection: a bug).
  std::shared_ptr<TcSession> Current() {
    const server::CallContext* call = server::CallContext::Current();
    if (call == nullptr) throw proto::ToDeuteronError(Status::Internal("a TC call outside a connection"));
    std::lock_guard<std::mutex> l(mu_);
    auto it = sessions_.find(call->connection().id);
    if (it == sessions_.end()) {
      throw proto::ToDeuteronError(Status::Unavailable("the connection is closing"));
    }
    return it->second;
  }

 private:
  TcService* const service_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<TcSession>> sessions_;  // GUARDED_BY(mu_)
};

// The one handler the processor calls: routes each call to its
// connection's session. Thread-safe.
class Router final : public proto::TransactionServiceIf {
 public:
  explicit Router(Sessions* sessions) : sessions_(sessions) {}

  int64_t beginTransaction() override { return sessions_->Current()->beginTransaction(); }
  void get(proto::TcReadResult& out, int64_t txn, const std::string& key) override {
    sessions_->Current()->get(out, txn, key);
  }
  void put(int64_t txn, const std::string& key, const std::string& value) override {
    sessions_->Current()->put(txn, key, value);
  }
  void remove(int64_t txn, const std::string& key) override { sessions_->Current()->remove(txn, key); }
  void scan(proto::TcScanPage& out, int64_t txn, const proto::ScanRequest& request) override {
    sessions_->Current()->scan(out, txn, request);
  }
  void commit(int64_t txn) override { sessions_->Current()->commit(txn); }
  void abort(int64_t txn) override { sessions_->Current()->abort(txn); }
  void execute(proto::ExecuteResult& out, const proto::ExecuteRequest& request) override {
    sessions_->Current()->execute(out, request);
  }
  void tcStats(proto::TcStats& out) override { sessions_->Current()->tcStats(out); }
  // Answered by the server layer; never reaches the handler.
  void authenticate(const std::string& /*token*/) override {
    throw proto::ToDeuteronError(Status::Internal("authenticate reached the TC handler"));
  }

 private:
  Sessions* const sessions_;
};

}  // namespace

class TcServer::Service final : public server::Service {
 public:
  Service(TxnManager* tm, const TcServiceOptions& options)
      : tc_(tm, options),
        sessions_(&tc_),
        processor_(std::make_shared<proto::TransactionServiceProcessor>(std::make_shared<Router>(&sessions_))) {}

  std::shared_ptr<apache::thrift::TProcessor> processor() override { return processor_; }

  // Every TC call may wait for a lock or a log force: none runs on a loop.
  bool RunsInline(std::string_view /*method*/) const override { return false; }

  // The methods of TransactionService (keep in step with deuteron.thrift).
  bool IsKnownMethod(std::string_view method) const override {
    static constexpr std::string_view kMethods[] = {"beginTransaction", "get",    "put",
                                                    "remove",           "scan",   "commit",
                                                    "abort",            "execute", "authenticate",
                                                    "tcStats"};
    return std::find(std::begin(kMethods), std::end(kMethods), method) != std::end(kMethods);
  }

  void OnConnectionOpen(const server::ConnectionInfo& connection) override { sessions_.Open(connection.id); }
  void OnConnectionClose(const server::ConnectionInfo& connection) override {
    sessions_.Close(connection.id);
  }

  TcService& tc() { return tc_; }

 private:
  TcService tc_;
  Sessions sessions_;
  std::shared_ptr<apache::thrift::TProcessor> processor_;
};

TcServer::TcServer(TxnManager* tm, TcServerOptions options)
    : service_(std::make_unique<Service>(tm, options.service)),
      server_(std::make_unique<server::FramedServer>(
          service_.get(), static_cast<server::ServerOptions>(std::move(options)))) {}

TcServer::~TcServer() { Stop(); }

Status TcServer::Start() {
  const TcServiceOptions& o = service_->tc().options();
  if (o.max_open_transactions == 0 || o.max_scan_page == 0) {
    return Status::InvalidArgument("TcServiceOptions: max_open_transactions and max_scan_page must be >= 1");
  }
  return server_->Start();
}

void TcServer::Stop() {
  service_->tc().Shutdown();
  server_->Stop();  // the close hooks abort every connection's transactions
}

uint16_t TcServer::port() const { return server_->port(); }
size_t TcServer::connections() const { return server_->stats().connections; }
size_t TcServer::open_transactions() const { return service_->tc().open_transactions(); }
server::ServerStats TcServer::stats() const { return server_->stats(); }
const TcBudget& TcServer::budget() const { return service_->tc().budget(); }

}  // namespace deuteron::tc
