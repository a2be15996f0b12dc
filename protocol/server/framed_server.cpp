#include "protocol/server/framed_server.h"

#include "protocol/server/internal/connection.h"
#include "protocol/server/internal/server_impl.h"

namespace deuteron::server {

// ---- CallContext ----

namespace {
thread_local CallContext* current_call = nullptr;
}  // namespace

CallContext::CallContext(const ConnectionInfo* connection, size_t reply_limit, MemoryGauge* gauge)
    : connection_(connection), reply_limit_(reply_limit), gauge_(gauge), previous_(current_call) {
  current_call = this;
}

CallContext::~CallContext() {
  if (gauge_ != nullptr && charged_ > 0) gauge_->Release(charged_);
  current_call = previous_;
}

CallContext* CallContext::Current() { return current_call; }

Status CallContext::ChargeReply(size_t bytes) {
  if (refused_ || charged_ + bytes > reply_limit_) {
    refused_ = true;
    return Status::TooLarge(fmt::format("reply over the frame limit of {} bytes", reply_limit_));
  }
  charged_ += bytes;
  if (gauge_ != nullptr) gauge_->Charge(bytes);
  return Status::OK();
}

Status ChargeReply(size_t bytes) {
  CallContext* c = CallContext::Current();
  return c == nullptr ? Status::OK() : c->ChargeReply(bytes);
}

using namespace internal;  // NOLINT: this file is the layer's own

FramedServer::Impl::Impl(Service* service, ServerOptions options)
    : service_(service),
      options_(std::move(options)),
      gauge_(options_.request_memory_limit),
      ios_(MakeLoops(options_.io_threads)),
      accept_strand_(asio::make_strand(*ios_[0])),
      acceptor_(accept_strand_),
      accept_retry_(accept_strand_) {
  // The memory transports' message-size budget covers a whole frame.
  const int max_message = static_cast<int>(std::min<uint64_t>(options_.max_frame_size, INT32_MAX));
  config_ = std::make_shared<thrift::TConfiguration>(max_message, max_message);
}

ServerStats FramedServer::Impl::stats() const {
  ServerStats s;
  {
    std::lock_guard<std::mutex> l(mu_);
    s.connections = conns_.size();
  }
  s.refused_connections = refused_.load();
  s.evicted_connections = evicted_.load();
  s.idle_closed = idle_closed.load();
  s.deadline_closed = deadline_closed.load();
  s.auth_failures = auth_failures.load();
  s.memory_used = gauge_.used();
  s.memory_peak = gauge_.peak();
  s.memory_limit = gauge_.limit();
  return s;
}

Status FramedServer::Impl::Start() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (started_) return Status::InvalidArgument("FramedServer::Start called twice");
  started_ = true;
  const ServerOptions& o = options_;
  const std::string& n = o.name;
  if (o.io_threads < 1 || o.worker_threads < 1) {
    return Status::InvalidArgument(n + ": io_threads and worker_threads must be >= 1");
  }
  if (o.max_frame_size < 64) return Status::InvalidArgument(n + ": max_frame_size below 64");
  if (o.max_connections == 0) return Status::InvalidArgument(n + ": max_connections is 0");
  if (o.request_memory_limit < o.max_frame_size) {
    return Status::InvalidArgument(fmt::format(
        "{}: request_memory_limit ({}) below max_frame_size ({})", n, o.request_memory_limit,
        o.max_frame_size));
  }

  boost::system::error_code ec;
  tcp::resolver resolver(*ios_[0]);
  const auto endpoints = resolver.resolve(o.host, std::to_string(o.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return Status::InvalidArgument(fmt::format("{}: cannot resolve {}: {}", n, o.host, ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  if (!endpoint.address().is_loopback() && o.shared_secret.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: refusing to listen on {} without a shared secret: any host that reaches this address "
        "could steer the server. Give a secret (a file or an environment variable) or listen on "
        "a loopback address",
        n, endpoint.address().to_string()));
  }
  const std::string where = fmt::format("{}:{}", o.host, o.port);
  auto fail = [&](const char* what) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    const std::string msg = fmt::format("{}: {} {}: {}", n, what, where, ec.message());
    if (ec == asio::error::address_in_use) return Status::Busy(msg);
    return Status::IOError(msg);
  };
  acceptor_.open(endpoint.protocol(), ec);
  if (ec) return fail("open socket for");
  acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (ec) return fail("set SO_REUSEADDR on");
  acceptor_.bind(endpoint, ec);
  if (ec) return fail("bind");
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen on");
  const tcp::endpoint bound = acceptor_.local_endpoint(ec);
  if (ec) return fail("read the address of");
  port_.store(bound.port());

  processor_ = service_->processor();
  for (auto& io : ios_) work_.push_back(asio::make_work_guard(*io));
  workers_ = std::make_unique<asio::thread_pool>(static_cast<size_t>(o.worker_threads));
  asio::post(accept_strand_, [this] { DoAccept(); });
  for (auto& loop : ios_) {
    io_threads_.emplace_back([io = loop.get(), n] {
      for (;;) {
        try {
          io->run();
          return;
        } catch (const std::exception& e) {  // no handler should throw; keep serving
          DLOG_ERROR("{}: io thread caught {}", n, e.what());
        }
      }
    });
  }
  DLOG_INFO("{} listening on {}:{}", n, bound.address().to_string(), bound.port());
  return Status::OK();
}

void FramedServer::Impl::DoAccept() {
  asio::io_context& io = *ios_[next_io_++ % ios_.size()];
  acceptor_.async_accept(asio::make_strand(io),
                         [this](const boost::system::error_code& ec, Socket socket) {
                           OnAccept(ec, std::move(socket));
                         });
}

std::shared_ptr<Connection> FramedServer::Impl::PickEvictableLocked() {
  std::shared_ptr<Connection> best;
  int64_t best_last = 0;
  for (auto& [id, weak] : conns_) {
    auto c = weak.lock();
    if (!c || c->evicting() || c->running()) continue;
    const int64_t last = c->last_request_ns();
    if (!best || last < best_last) {
      best = std::move(c);
      best_last = last;
    }
  }
  return best;
}

void FramedServer::Impl::OnAccept(const boost::system::error_code& ec, Socket socket) {
  if (ec) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    // Out of descriptors, say: try again shortly rather than spin.
    DLOG_WARN("{}: accept failed: {}", options_.name, ec.message());
    accept_retry_.expires_after(std::chrono::milliseconds(50));
    accept_retry_.async_wait([this](const boost::system::error_code& wait_ec) {
      if (!wait_ec && acceptor_.is_open()) DoAccept();
    });
    return;
  }
  // Replies go out whole in one write: no reason to let Nagle hold one back
  // behind an unacknowledged earlier reply of a pipelining client.
  boost::system::error_code nodelay_ec;
  socket.set_option(tcp::no_delay(true), nodelay_ec);  // best effort
  std::shared_ptr<Connection> conn;
  std::shared_ptr<Connection> evict;
  bool refuse = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;  // the socket closes as it goes out of scope
    // Connections being evicted still count until they are gone, so the
    // number open never passes the limit by more than those.
    size_t live = 0;
    for (auto& [id, weak] : conns_) {
      auto c = weak.lock();
      if (c && !c->evicting()) ++live;
    }
    if (live >= options_.max_connections) {
      evict = PickEvictableLocked();
      if (evict && !evict->ClaimEviction()) evict.reset();
      refuse = !evict;
    }
    if (!refuse) {
      const uint64_t id = next_id_++;
      conn = std::make_shared<Connection>(this, id, std::move(socket));
      conns_.emplace(id, conn);
    }
  }
  if (refuse) {
    refused_.fetch_add(1);
    DLOG_WARN("{}: refusing a connection: {} open, the limit, each running a call", options_.name,
              options_.max_connections);
    boost::system::error_code ignored;
    socket.close(ignored);
  } else {
    if (evict) {
      evicted_.fetch_add(1);
      asio::post(evict->strand(), [evict] { evict->Close("evicted: the longest idle, to admit a new one"); });
    }
    asio::post(conn->strand(), [conn] { conn->Start(); });
  }
  DoAccept();
}

void FramedServer::Impl::MarkClosed(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  if (conns_.erase(id) > 0) ++closing_;
}

void FramedServer::Impl::Unregister(uint64_t id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (conns_.erase(id) == 0) --closing_;
  }
  conns_changed_.notify_all();
}

std::optional<std::string> FramedServer::Impl::Process(const ConnectionInfo& conn,
                                                       std::string& payload) {
  auto* data = reinterpret_cast<uint8_t*>(payload.data());
  const auto size = static_cast<uint32_t>(payload.size());
  // The decoded request, estimated at the payload's size, while it runs.
  struct DecodedCharge {
    MemoryGauge& gauge;
    size_t bytes;
    ~DecodedCharge() { gauge.Release(bytes); }
  } decoded{gauge_, size};
  gauge_.Charge(size);
  std::string name;
  int32_t seqid = 0;
  bool have_header = false;
  try {
    try {
      // Read the header first on its own, to be able to answer this call
      // whatever happens while decoding its arguments.
      thrift::protocol::TMessageType type = thrift::protocol::T_CALL;
      {
        auto peek = std::make_shared<TMemoryBuffer>(data, size, TMemoryBuffer::OBSERVE, config_);
        TBinaryProtocol p(peek, options_.string_limit, options_.container_limit, true, true);
        p.readMessageBegin(name, type, seqid);
      }
      have_header = true;
      if (type != thrift::protocol::T_CALL) {
        return ApplicationErrorReply(name, seqid, TApplicationException::INVALID_MESSAGE_TYPE,
                                     fmt::format("message type {} is not a call", static_cast<int>(type)));
      }
      auto in = std::make_shared<TMemoryBuffer>(data, size, TMemoryBuffer::OBSERVE, config_);
      std::shared_ptr<TMemoryBuffer>& out = ReplyBuffer();
      // Room for the frame's length word, filled in below: the reply is
      // then copied once, into its frame.
      const uint8_t hole[kFrameHeader] = {0, 0, 0, 0};
      out->write(hole, kFrameHeader);
      auto iprot = std::make_shared<TBinaryProtocol>(in, options_.string_limit,
                                                     options_.container_limit, true, true);
      auto oprot = std::make_shared<TBinaryProtocol>(out);
      {
        CallContext call(&conn, options_.max_frame_size, &gauge_);
        processor_->process(iprot, oprot, nullptr);
      }
      uint8_t* buf = nullptr;
      uint32_t n = 0;
      out->getBuffer(&buf, &n);
      const size_t reply_size = n - kFrameHeader;
      if (reply_size > options_.max_frame_size) {
        out.reset();
        return TypedErrorReply(name, seqid,
                               Status::TooLarge(fmt::format("reply of {} bytes over the frame limit of {}",
                                                            reply_size, options_.max_frame_size)));
      }
      PutBigEndian32(buf, static_cast<uint32_t>(reply_size));
      std::string reply(reinterpret_cast<const char*>(buf), n);
      if (n > kKeptReplyBuffer) out.reset();  // do not hold on to a rare big one
      return reply;
    } catch (const TProtocolException& e) {
      if (have_header && e.getType() == TProtocolException::SIZE_LIMIT && service_->IsKnownMethod(name)) {
        return TypedErrorReply(name, seqid, Status::TooLarge(fmt::format("request: {}", e.what())));
      }
      return ApplicationErrorReply(name, seqid, TApplicationException::PROTOCOL_ERROR,
                                   fmt::format("malformed request: {}", e.what()));
    } catch (const TTransportException& e) {  // the payload ended inside the message
      return ApplicationErrorReply(name, seqid, TApplicationException::PROTOCOL_ERROR,
                                   fmt::format("truncated request: {}", e.what()));
    } catch (const std::exception& e) {
      DLOG_WARN("{}: request failed: {}", options_.name, e.what());
      return ApplicationErrorReply(name, seqid, TApplicationException::INTERNAL_ERROR, e.what());
    }
  } catch (...) {  // building the error reply itself failed (out of memory)
    return std::nullopt;
  }
}

void FramedServer::Impl::Stop() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (!started_ || stopped_) return;
  stopped_ = true;
  if (work_.empty()) return;  // Start failed before any thread ran

  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    for (auto& [id, weak] : conns_) {
      if (auto conn = weak.lock()) open.push_back(std::move(conn));
    }
  }
  asio::post(accept_strand_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
  });
  for (auto& conn : open) {
    asio::post(conn->strand(), [conn] { conn->Close("server stopping"); });
  }
  open.clear();
  {
    std::unique_lock<std::mutex> l(mu_);
    conns_changed_.wait(l, [this] { return conns_.empty() && closing_ == 0; });
  }
  workers_->join();  // calls and close hooks in progress return
  work_.clear();     // io threads return once the last handlers ran
  for (std::thread& t : io_threads_) t.join();
  io_threads_.clear();
  DLOG_INFO("{} on port {} stopped", options_.name, port_.load());
}

FramedServer::FramedServer(Service* service, ServerOptions options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {}

FramedServer::~FramedServer() { impl_->Stop(); }

Status FramedServer::Start() { return impl_->Start(); }
void FramedServer::Stop() { impl_->Stop(); }
uint16_t FramedServer::port() const { return impl_->port(); }
const ServerOptions& FramedServer::options() const { return impl_->options(); }
ServerStats FramedServer::stats() const { return impl_->stats(); }

}  // namespace deuteron::server
