#include "tc/server/tc_server.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <thrift/TConfiguration.h>
#include <thrift/TOutput.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>
#include <thrift/transport/TTransportException.h>

#include "TransactionService.h"
#include "common/logging.h"

namespace deuteron::tc {
namespace {

namespace proto = ::deuteron::protocol;
namespace thrift = ::apache::thrift;
using thrift::transport::TServerSocket;
using thrift::transport::TServerTransport;
using thrift::transport::TTransport;
using thrift::transport::TTransportException;

// The listening socket, listened on by Start (so that a bind failure is
// Start's to report) and not again by the server's serve().
class ListenedSocket final : public TServerTransport {
 public:
  explicit ListenedSocket(std::shared_ptr<TServerSocket> inner) : inner_(std::move(inner)) {}
  bool isOpen() const override { return inner_->isOpen(); }
  void listen() override {}
  void interrupt() override { inner_->interrupt(); }
  void interruptChildren() override { inner_->interruptChildren(); }
  THRIFT_SOCKET getSocketFD() override { return inner_->getSocketFD(); }
  void close() override { inner_->close(); }

 protected:
  std::shared_ptr<TTransport> acceptImpl() override { return inner_->accept(); }

 private:
  std::shared_ptr<TServerSocket> inner_;
};

// A framed transport that refuses a message running past the end of its
// frame: the stock one would wait for the next frame to finish it, so a
// frame whose message is cut short would hold its connection until the idle
// timeout. A message reads its frame on its first slow read; a second slow
// read before the message's readEnd means the frame ran out.
class MessageBoundTransport final : public thrift::transport::TFramedTransport {
 public:
  MessageBoundTransport(std::shared_ptr<TTransport> trans, std::shared_ptr<thrift::TConfiguration> config)
      : TFramedTransport(std::move(trans), std::move(config)) {}

  uint32_t readSlow(uint8_t* buf, uint32_t len) override {
    if (in_message_) {
      throw TTransportException(TTransportException::CORRUPTED_DATA,
                                "a message runs past the end of its frame");
    }
    in_message_ = true;
    return TFramedTransport::readSlow(buf, len);
  }

  uint32_t readEnd() override {
    in_message_ = false;
    return TFramedTransport::readEnd();
  }

 private:
  bool in_message_ = false;
};

// Frames each connection with the server's frame limit (the stock factory
// takes the socket's default configuration).
class FramedFactory final : public thrift::transport::TTransportFactory {
 public:
  explicit FramedFactory(std::shared_ptr<thrift::TConfiguration> config) : config_(std::move(config)) {}
  std::shared_ptr<TTransport> getTransport(std::shared_ptr<TTransport> trans) override {
    return std::make_shared<MessageBoundTransport>(std::move(trans), config_);
  }

 private:
  std::shared_ptr<thrift::TConfiguration> config_;
};

// One TcSession per connection: the generated processor factory asks for a
// handler when a connection opens and releases it when it closes (the
// close hook: the session aborts its transactions).
class SessionFactory final : public proto::TransactionServiceIfFactory {
 public:
  explicit SessionFactory(TcService* service) : service_(service) {}

  proto::TransactionServiceIf* getHandler(const thrift::TConnectionInfo&) override {
    std::shared_ptr<TcSession> session = service_->OpenSession();
    TcSession* raw = session.get();
    std::lock_guard<std::mutex> l(mu_);
    sessions_.emplace(raw, std::move(session));
    return raw;
  }

  void releaseHandler(proto::TransactionServiceIf* handler) override {
    std::shared_ptr<TcSession> session;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sessions_.find(handler);
      if (it == sessions_.end()) return;
      session = std::move(it->second);
      sessions_.erase(it);
    }
    session->Close();
  }

  size_t size() const {
    std::lock_guard<std::mutex> l(mu_);
    return sessions_.size();
  }

  // Closes whatever sessions are left (after the server stopped).
  void CloseAll() {
    std::unordered_map<proto::TransactionServiceIf*, std::shared_ptr<TcSession>> left;
    {
      std::lock_guard<std::mutex> l(mu_);
      left.swap(sessions_);
    }
    for (auto& [raw, session] : left) session->Close();
  }

 private:
  TcService* const service_;
  mutable std::mutex mu_;
  std::unordered_map<proto::TransactionServiceIf*, std::shared_ptr<TcSession>> sessions_;
};

// Thrift's own diagnostics (a connection dropped for bad input, say) go to
// our log instead of stderr.
void ThriftOutput(const char* msg) { DLOG_INFO("TC server: thrift: {}", msg); }

}  // namespace

class TcServer::Impl {
 public:
  Impl(TxnManager* tm, TcServerOptions options)
      : options_(std::move(options)),
        service_(tm, options_.service),
        sessions_(std::make_shared<SessionFactory>(&service_)) {}
  ~Impl() { Stop(); }

  Status Start();
  void Stop();

  uint16_t port() const { return port_.load(); }
  size_t connections() const { return sessions_->size(); }
  size_t open_transactions() const { return service_.open_transactions(); }

 private:
  const TcServerOptions options_;
  TcService service_;
  std::shared_ptr<SessionFactory> sessions_;
  std::shared_ptr<thrift::server::TThreadedServer> server_;
  std::thread thread_;
  std::mutex lifecycle_mu_;
  bool started_ = false;  // GUARDED_BY(lifecycle_mu_)
  bool stopped_ = false;  // GUARDED_BY(lifecycle_mu_)
  std::atomic<uint16_t> port_{0};
};

Status TcServer::Impl::Start() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (started_) return Status::InvalidArgument("TcServer::Start called twice");
  started_ = true;
  const TcServerOptions& o = options_;
  if (o.max_frame_size < 64) return Status::InvalidArgument("TcServerOptions: max_frame_size below 64");
  if (o.max_connections == 0) return Status::InvalidArgument("TcServerOptions: max_connections is 0");
  if (o.string_limit <= 0 || o.container_limit <= 0) {
    return Status::InvalidArgument("TcServerOptions: string_limit and container_limit must be positive");
  }
  if (o.service.max_open_transactions == 0 || o.service.max_scan_page == 0) {
    return Status::InvalidArgument("TcServiceOptions: max_open_transactions and max_scan_page must be >= 1");
  }
  const int max_frame = static_cast<int>(std::min<uint32_t>(o.max_frame_size, INT32_MAX));
  auto config = std::make_shared<thrift::TConfiguration>(max_frame, max_frame);
  auto socket = std::make_shared<TServerSocket>(o.host, o.port);
  const int idle_ms = static_cast<int>(std::min<int64_t>(o.idle_timeout.count(), INT32_MAX));
  if (idle_ms > 0) {
    socket->setRecvTimeout(idle_ms);
    socket->setSendTimeout(idle_ms);
  }
  try {
    socket->listen();
  } catch (const TTransportException& e) {
    const std::string msg = fmt::format("TC server: listen on {}:{}: {}", o.host, o.port, e.what());
    if (std::string(e.what()).find("in use") != std::string::npos) return Status::Busy(msg);
    if (std::string(e.what()).find("resolve") != std::string::npos) return Status::InvalidArgument(msg);
    return Status::IOError(msg);
  }
  port_.store(static_cast<uint16_t>(socket->getPort()));
  thrift::GlobalOutput.setOutputFunction(&ThriftOutput);

  auto transport = std::make_shared<ListenedSocket>(socket);
  auto processor = std::make_shared<proto::TransactionServiceProcessorFactory>(sessions_);
  auto framed = std::make_shared<FramedFactory>(config);
  // Requests are read strictly, strings and lists within their limits.
  auto binary = std::make_shared<thrift::protocol::TBinaryProtocolFactory>(
      o.string_limit, o.container_limit, /*strict_read=*/true, /*strict_write=*/true);
  server_ = std::make_shared<thrift::server::TThreadedServer>(processor, transport, framed, binary);
  server_->setConcurrentClientLimit(static_cast<int64_t>(o.max_connections));
  thread_ = std::thread([server = server_] {
    try {
      server->serve();
    } catch (const std::exception& e) {
      DLOG_ERROR("TC server: serve ended: {}", e.what());
    }
  });
  DLOG_INFO("TC server listening on {}:{}", o.host, port_.load());
  return Status::OK();
}

void TcServer::Impl::Stop() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (!started_ || stopped_) return;
  stopped_ = true;
  service_.Shutdown();
  if (server_) server_->stop();  // interrupts the listener and every connection
  if (thread_.joinable()) thread_.join();  // serve() returns once every connection ended
  sessions_->CloseAll();
  server_.reset();
  DLOG_INFO("TC server on port {} stopped", port_.load());
}

TcServer::TcServer(TxnManager* tm, TcServerOptions options)
    : impl_(std::make_unique<Impl>(tm, std::move(options))) {}
TcServer::~TcServer() { impl_->Stop(); }
Status TcServer::Start() { return impl_->Start(); }
void TcServer::Stop() { impl_->Stop(); }
uint16_t TcServer::port() const { return impl_->port(); }
size_t TcServer::connections() const { return impl_->connections(); }
size_t TcServer::open_transactions() const { return impl_->open_transactions(); }

}  // namespace deuteron::tc
