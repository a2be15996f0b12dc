#include "dc/dc_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <poll.h>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <thrift/TApplicationException.h>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/protocol/TProtocolException.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TTransportException.h>

#include "DataComponentService.h"
#include "common/logging.h"
#include "protocol/convert.h"
#include "protocol/errors.h"

namespace deuteron::dc {
namespace {

namespace asio = boost::asio;
namespace proto = ::deuteron::protocol;
namespace thrift = ::apache::thrift;
using asio::ip::tcp;
using thrift::TApplicationException;
using thrift::protocol::TBinaryProtocol;
using thrift::protocol::TProtocolException;
using thrift::transport::TMemoryBuffer;
using thrift::transport::TTransportException;

using Strand = asio::strand<asio::io_context::executor_type>;
using Socket = tcp::socket::rebind_executor<Strand>::other;
using Timer = asio::steady_timer::rebind_executor<Strand>::other;
using Clock = std::chrono::steady_clock;

constexpr size_t kFrameHeader = 4;
constexpr size_t kReadChunk = 64 * 1024;
// Most requests queued on one connection before it stops reading.
constexpr size_t kMaxQueuedFrames = 256;

uint32_t GetBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

void AppendFrame(std::string* out, const std::string& payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  const char header[kFrameHeader] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                                     static_cast<char>(n >> 8), static_cast<char>(n)};
  out->append(header, kFrameHeader);
  out->append(payload);
}

// The methods of DataComponentService (keep in step with deuteron.thrift).
bool IsKnownMethod(const std::string& name) {
  static const char* const kMethods[] = {"apply",  "get",         "multiGet",
                                         "scan",   "setEsl",      "proposeRssp",
                                         "restartTo", "stats",    "health"};
  for (const char* m : kMethods) {
    if (name == m) return true;
  }
  return false;
}

// The DataComponentServiceIf implementation: converts, calls the
// DataComponent, converts back. DataComponent errors leave as DeuteronError,
// which the generated processor turns into the call's typed error reply.
// Thread-safe as the DataComponent is.
class Handler final : public proto::DataComponentServiceIf {
 public:
  explicit Handler(DataComponent* dc) : dc_(dc) {}

  void apply(proto::ApplyResult& out, const proto::ApplyRequest& request) override {
    std::vector<RecordOp> ops;
    uint64_t esl = 0;
    Check(proto::FromWireApply(request, &ops, &esl));
    const uint64_t incarnation = Value(proto::FromWireLsn(request.incarnation, "incarnation"));
    out = proto::ToWire(Value(dc_->Apply(ops, esl, incarnation)));
  }

  void get(proto::ReadResult& out, const std::string& key) override {
    out = proto::ToWire(Value(dc_->Get(Slice(key))));
  }

  void multiGet(std::vector<proto::ReadResult>& out, const std::vector<std::string>& keys) override {
    const std::vector<Slice> slices = proto::FromWireKeys(keys);
    std::vector<ReadResult> results = Value(dc_->MultiGet(slices));
    out.clear();
    out.reserve(results.size());
    for (ReadResult& r : results) out.push_back(proto::ToWire(std::move(r)));
  }

  void scan(proto::ScanResult& out, const proto::ScanRequest& request) override {
    const ScanRequest r = Value(proto::FromWireScan(request));
    out = proto::ToWire(Value(dc_->Scan(r)));
  }

  void setEsl(const int64_t esl, const int64_t incarnation) override {
    Check(dc_->SetEsl(Value(proto::FromWireLsn(esl, "ESL")),
                      Value(proto::FromWireLsn(incarnation, "incarnation"))));
  }

  void proposeRssp(const int64_t rssp, const int64_t incarnation) override {
    Check(dc_->ProposeRssp(Value(proto::FromWireLsn(rssp, "RSSP")),
                           Value(proto::FromWireLsn(incarnation, "incarnation"))));
  }

  void restartTo(proto::DcReady& out, const int64_t stable_end, const std::string& store_id) override {
    const uint64_t end = Value(proto::FromWireLsn(stable_end, "stable end"));
    if (store_id.empty()) {  // absent (an older TC): no check
      out = proto::ToWire(Value(dc_->RestartTo(end)));
      return;
    }
    const StoreId id = Value(StoreId::FromBytes(store_id));
    out = proto::ToWire(Value(dc_->RestartToStore(end, id)));
  }

  void stats(proto::DcStats& out) override { out = proto::ToWire(Value(dc_->GetStats())); }

  void health(proto::DcHealth& out) override { out = proto::ToWire(Value(dc_->Health())); }

 private:
  static void Check(const Status& s) {
    if (!s.ok()) throw proto::ToDeuteronError(s);
  }
  template <typename T>
  static T Value(Result<T> r) {
    if (!r.ok()) throw proto::ToDeuteronError(r.status());
    return std::move(r).value();
  }

  DataComponent* const dc_;
};

// Whether a request payload calls a method that runs on the connection's
// strand rather than a worker: every call whose work is bounded by the
// request's own limits and that never waits for another call (during a
// restart they answer Unavailable at once). That skips two thread hand-offs
// per call. proposeRssp (waits for a flush of every page) and restartTo
// (recovers the store) stay on the workers, as does anything unknown or
// not a strict binary header, which a worker answers.
bool RunsInline(const std::string& payload) {
  static const std::string_view kInline[] = {"apply",  "get",   "multiGet", "scan",
                                             "setEsl", "stats", "health"};
  if (payload.size() < 8) return false;
  const auto* u = reinterpret_cast<const unsigned char*>(payload.data());
  if (u[0] != 0x80 || u[1] != 0x01) return false;  // not a strict binary header
  const uint32_t len = GetBigEndian32(payload.data() + 4);
  if (len > payload.size() - 8) return false;
  const std::string_view name(payload.data() + 8, len);
  return std::find(std::begin(kInline), std::end(kInline), name) != std::end(kInline);
}

// A reply carrying TApplicationException `type` for call (name, seqid).
std::string ApplicationErrorReply(const std::string& name, int32_t seqid,
                                  TApplicationException::TApplicationExceptionType type,
                                  const std::string& message) {
  auto out = std::make_shared<TMemoryBuffer>();
  TBinaryProtocol p(out);
  TApplicationException x(type, message);
  p.writeMessageBegin(name, thrift::protocol::T_EXCEPTION, seqid);
  x.write(&p);
  p.writeMessageEnd();
  return out->getBufferAsString();
}

// A normal reply whose result struct holds field 1, the DeuteronError: every
// method of the service declares `throws (1: DeuteronError error)`, so this
// decodes as that method's typed error whatever the method.
std::string TypedErrorReply(const std::string& name, int32_t seqid, const Status& s) {
  auto out = std::make_shared<TMemoryBuffer>();
  TBinaryProtocol p(out);
  p.writeMessageBegin(name, thrift::protocol::T_REPLY, seqid);
  p.writeStructBegin("result");
  p.writeFieldBegin("error", thrift::protocol::T_STRUCT, 1);
  proto::ToDeuteronError(s).write(&p);
  p.writeFieldEnd();
  p.writeFieldStop();
  p.writeStructEnd();
  p.writeMessageEnd();
  return out->getBufferAsString();
}

class Connection;

// This thread's reply buffer, empty and reused from call to call: a fresh
// one grew by doubling, a handful of large allocations per 256-key reply
// (each consolidating malloc's fast bins of the call's small frees). One
// that served a reply over kKeptReplyBuffer is dropped afterwards.
constexpr size_t kKeptReplyBuffer = 1 << 20;
std::shared_ptr<TMemoryBuffer>& ReplyBuffer() {
  thread_local std::shared_ptr<TMemoryBuffer> buffer;
  if (!buffer) buffer = std::make_shared<TMemoryBuffer>(64 * 1024);
  buffer->resetBuffer();
  return buffer;
}

// The io loops: `n` of them (at least one, so that a server whose Start
// rejects its options can still be built and destroyed). Concurrency hint 1:
// one thread runs each loop (posts from other threads stay safe).
std::vector<std::unique_ptr<boost::asio::io_context>> MakeLoops(int n) {
  std::vector<std::unique_ptr<boost::asio::io_context>> loops;
  for (int i = 0; i < std::max(n, 1); ++i) loops.push_back(std::make_unique<boost::asio::io_context>(1));
  return loops;
}

}  // namespace

class DcServer::Impl {
 public:
  Impl(DataComponent* dc, DcServerOptions options);
  ~Impl() { Stop(); }

  Status Start();
  void Stop();

  uint16_t port() const { return port_.load(); }
  size_t connections() const {
    std::lock_guard<std::mutex> l(mu_);
    return conns_.size();
  }
  uint64_t refused() const { return refused_.load(); }

  // Used by connections.
  const DcServerOptions& options() const { return options_; }
  asio::thread_pool& workers() { return *workers_; }
  // Decodes one request payload, runs it, and returns the reply payload;
  // nullopt when not even an error reply could be built (close the
  // connection). Runs on a worker or, for RunsInline calls, on the
  // connection's strand; never throws.
  std::optional<std::string> Process(std::string& payload);
  void Unregister(uint64_t id);

 private:
  void DoAccept();
  void OnAccept(const boost::system::error_code& ec, Socket socket);

  const DcServerOptions options_;
  std::shared_ptr<Handler> handler_;
  std::shared_ptr<proto::DataComponentServiceProcessor> processor_;
  std::shared_ptr<thrift::TConfiguration> config_;

  // One event loop per io thread, each run by its thread alone: a
  // connection lives on one loop (round robin at accept), so its socket
  // events, inline calls and writes never hop threads, and no loop wakes a
  // second thread to run what it dequeued (asio's shared-loop pattern costs
  // a futex wake per event).
  std::vector<std::unique_ptr<asio::io_context>> ios_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  size_t next_io_ = 0;      // used on accept_strand_ only
  Strand accept_strand_;    // on ios_[0]
  tcp::acceptor acceptor_;  // used on accept_strand_ only
  Timer accept_retry_;      // after a failed accept (out of descriptors)
  std::unique_ptr<asio::thread_pool> workers_;
  std::vector<std::thread> io_threads_;

  std::mutex lifecycle_mu_;  // serializes Start and Stop
  bool started_ = false;     // GUARDED_BY(lifecycle_mu_)
  bool stopped_ = false;     // GUARDED_BY(lifecycle_mu_)

  mutable std::mutex mu_;
  std::condition_variable conns_changed_;
  bool stopping_ = false;                                          // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;                                           // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> conns_;  // GUARDED_BY(mu_)

  std::atomic<uint16_t> port_{0};
  std::atomic<uint64_t> refused_{0};
};

namespace {

// One client connection. Every member below is used on strand_ only (the
// socket's and the timer's executor); the workers touch nothing but the
// payload they were handed, and post the reply back to strand_.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(DcServer::Impl* server, uint64_t id, Socket socket)
      : server_(server),
        id_(id),
        max_frame_(server->options().max_frame_size),
        strand_(socket.get_executor()),
        socket_(std::move(socket)),
        timer_(strand_) {}

  const Strand& strand() const { return strand_; }

  void Start() {
    if (closed_) return;
    last_activity_ = Clock::now();
    ArmTimer();
    DoRead();
  }

  void Close(const char* why) {
    if (closed_) return;
    closed_ = true;
    gone_.store(true, std::memory_order_relaxed);
    if (!queue_.empty()) {
      DLOG_DEBUG("DC server: connection {}: dropping {} queued requests", id_, queue_.size());
    }
    queue_.clear();  // never run: their client is gone (a previous TC, say)
    queued_bytes_ = 0;
    DLOG_DEBUG("DC server: closing connection {}: {}", id_, why);
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    timer_.cancel();
    server_->Unregister(id_);
  }

 private:
  size_t PendingOut() const { return outbuf_.size() + wbuf_.size(); }

  // Whether the peer has closed or reset the connection, seen without
  // reading: while backpressure pauses reading, an end of stream behind the
  // unread requests would otherwise wait until they had all run.
  bool PeerGone() {
    pollfd p{};
    p.fd = socket_.native_handle();
    p.events = POLLRDHUP;
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

  bool CanRead() const {
    return !closed_ && !reading_ && !peer_eof_ && queue_.size() < kMaxQueuedFrames &&
           queued_bytes_ <= max_frame_ && PendingOut() <= max_frame_;
  }

  void DoRead() {
    reading_ = true;
    socket_.async_read_some(asio::buffer(chunk_),
                            [self = shared_from_this()](const boost::system::error_code& ec,
                                                        size_t n) { self->OnRead(ec, n); });
  }

  void OnRead(const boost::system::error_code& ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      if (ec != asio::error::eof) {
        Close("read failed");
        return;
      }
      if (!inbuf_.empty()) {
        DLOG_WARN("DC server: connection {} closed inside a frame ({} bytes of it dropped)", id_,
                  inbuf_.size());
        inbuf_.clear();
      }
      // The client is gone (a half-close counts as gone): what it queued is
      // dropped, not run on behalf of a client that may have been replaced.
      Close("peer closed");
      return;
    }
    last_activity_ = Clock::now();
    inbuf_.append(chunk_.data(), n);
    ParseFrames();
    if (closed_) return;
    MaybeDispatch();
    if (CanRead()) DoRead();
    MaybeFinish();
  }

  // Moves every complete frame from inbuf_ to queue_.
  void ParseFrames() {
    size_t pos = 0;
    while (inbuf_.size() - pos >= kFrameHeader) {
      const uint32_t len = GetBigEndian32(inbuf_.data() + pos);
      if (len == 0 || len > max_frame_) {
        DLOG_WARN("DC server: connection {} sent a frame of {} bytes (limit {}): closing it", id_,
                  len, max_frame_);
        // The stream is out of step: answer what came before, then one
        // typed error (no call to name: method "", seqid 0), then close.
        final_reply_ = BadFrameReply(len);
        inbuf_.clear();
        peer_eof_ = true;
        return;
      }
      if (inbuf_.size() - pos - kFrameHeader < len) break;
      queue_.push_back(inbuf_.substr(pos + kFrameHeader, len));
      queued_bytes_ += len;
      pos += kFrameHeader + len;
    }
    inbuf_.erase(0, pos);
  }

  // Hands the oldest queued request to a worker, or runs it on the strand
  // when RunsInline, unless one is in progress (one at a time keeps execution
  // and replies in arrival order).
  void MaybeDispatch() {
    if (closed_ || busy_ || queue_.empty() || PendingOut() > max_frame_) return;
    if (!reading_ && !peer_eof_ && PeerGone()) {
      Close("peer closed");  // noticed while reading was paused
      return;
    }
    busy_ = true;
    auto payload = std::make_shared<std::string>(std::move(queue_.front()));
    queue_.pop_front();
    queued_bytes_ -= payload->size();
    if (RunsInline(*payload)) {
      // Posted, not run here, so that a burst of pipelined reads still lets
      // the strand's reads and writes in between them.
      asio::post(strand_, [self = shared_from_this(), payload = std::move(payload)] {
        if (self->closed_) return;  // closed since: not run
        self->OnProcessed(self->server_->Process(*payload));
      });
      return;
    }
    // Moved, not copied, into the handler: the request is then owned by the
    // thread that runs it alone, and freed there (a copy left here was
    // released on the io thread while the worker still read the request).
    asio::post(server_->workers(), [self = shared_from_this(), payload = std::move(payload)] {
      if (self->gone_.load(std::memory_order_relaxed)) return;  // closed while queued
      std::optional<std::string> reply = self->server_->Process(*payload);
      asio::post(self->strand_, [self, reply = std::move(reply)]() mutable {
        self->OnProcessed(std::move(reply));
      });
    });
  }

  void OnProcessed(std::optional<std::string> reply) {
    busy_ = false;
    if (closed_) return;
    if (!reply) {
      Close("could not build a reply");
      return;
    }
    last_activity_ = Clock::now();
    AppendFrame(&outbuf_, *reply);
    if (!writing_) DoWrite();
    MaybeDispatch();
    if (CanRead()) DoRead();
  }

  void DoWrite() {
    writing_ = true;
    wbuf_.swap(outbuf_);
    outbuf_.clear();
    asio::async_write(socket_, asio::buffer(wbuf_),
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                        self->OnWrite(ec);
                      });
  }

  void OnWrite(const boost::system::error_code& ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) {
      Close("write failed");
      return;
    }
    wbuf_.clear();
    last_activity_ = Clock::now();
    if (!outbuf_.empty()) DoWrite();
    MaybeDispatch();
    if (CanRead()) DoRead();
    MaybeFinish();
  }

  // After the peer's EOF: close once every request read has been answered.
  void MaybeFinish() {
    if (!peer_eof_ || busy_ || !queue_.empty()) return;
    if (final_reply_) {
      AppendFrame(&outbuf_, *final_reply_);
      final_reply_.reset();
      if (!writing_) DoWrite();
      return;  // OnWrite comes back here once it is written
    }
    if (!writing_ && outbuf_.empty()) Close("peer closed");
  }

  std::string BadFrameReply(uint32_t len) const {
    if (len == 0) {
      return ApplicationErrorReply("", 0, TApplicationException::PROTOCOL_ERROR,
                                   "a zero-length frame");
    }
    return TypedErrorReply("", 0, Status::TooLarge(fmt::format(
                                      "a frame of {} bytes over the limit of {}", len, max_frame_)));
  }

  void ArmTimer() {
    const auto idle = server_->options().idle_timeout;
    if (idle.count() <= 0) return;
    timer_.expires_at(last_activity_ + idle);
    timer_.async_wait(
        [self = shared_from_this()](const boost::system::error_code&) { self->OnTimer(); });
  }

  void OnTimer() {
    if (closed_) return;
    const auto now = Clock::now();
    if (busy_) {
      last_activity_ = now;  // a DataComponent call in progress is not idleness
    } else if (now >= last_activity_ + server_->options().idle_timeout) {
      DLOG_INFO("DC server: connection {} idle for {} ms: closing it", id_,
                server_->options().idle_timeout.count());
      Close("idle");
      return;
    }
    ArmTimer();
  }

  DcServer::Impl* const server_;
  const uint64_t id_;
  const uint32_t max_frame_;
  const Strand strand_;
  Socket socket_;
  Timer timer_;

  std::array<char, kReadChunk> chunk_;
  std::string inbuf_;               // bytes read, not yet a whole frame
  std::deque<std::string> queue_;   // whole request payloads, in arrival order
  size_t queued_bytes_ = 0;
  std::string outbuf_;              // reply frames not yet handed to a write
  std::string wbuf_;                // the reply frames being written
  bool reading_ = false;
  bool busy_ = false;               // a request is on a worker
  bool writing_ = false;
  bool peer_eof_ = false;           // a bad frame header: read no more, answer, close
  // After a bad frame header: the last reply, sent once the requests before
  // it are answered; then the connection closes.
  std::optional<std::string> final_reply_;
  bool closed_ = false;
  // closed_ for the workers: a request handed to one after the close is not run.
  std::atomic<bool> gone_{false};
  Clock::time_point last_activity_;
};

}  // namespace

DcServer::Impl::Impl(DataComponent* dc, DcServerOptions options)
    : options_(std::move(options)),
      handler_(std::make_shared<Handler>(dc)),
      processor_(std::make_shared<proto::DataComponentServiceProcessor>(handler_)),
      ios_(MakeLoops(options_.io_threads)),
      accept_strand_(asio::make_strand(*ios_[0])),
      acceptor_(accept_strand_),
      accept_retry_(accept_strand_) {
  // The memory transports' message-size budget covers a whole frame.
  const int max_message = static_cast<int>(std::min<uint64_t>(options_.max_frame_size, INT32_MAX));
  config_ = std::make_shared<thrift::TConfiguration>(max_message, max_message);
}

Status DcServer::Impl::Start() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (started_) return Status::InvalidArgument("DcServer::Start called twice");
  started_ = true;
  const DcServerOptions& o = options_;
  if (o.io_threads < 1 || o.worker_threads < 1) {
    return Status::InvalidArgument("DcServerOptions: io_threads and worker_threads must be >= 1");
  }
  if (o.max_frame_size < 64) return Status::InvalidArgument("DcServerOptions: max_frame_size below 64");
  if (o.max_connections == 0) return Status::InvalidArgument("DcServerOptions: max_connections is 0");

  boost::system::error_code ec;
  tcp::resolver resolver(*ios_[0]);
  const auto endpoints = resolver.resolve(o.host, std::to_string(o.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return Status::InvalidArgument(fmt::format("DC server: cannot resolve {}: {}", o.host, ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  const std::string where = fmt::format("{}:{}", o.host, o.port);
  auto fail = [&](const char* what) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    const std::string msg = fmt::format("DC server: {} {}: {}", what, where, ec.message());
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

  for (auto& io : ios_) work_.push_back(asio::make_work_guard(*io));
  workers_ = std::make_unique<asio::thread_pool>(static_cast<size_t>(o.worker_threads));
  asio::post(accept_strand_, [this] { DoAccept(); });
  for (auto& loop : ios_) {
    io_threads_.emplace_back([io = loop.get()] {
      for (;;) {
        try {
          io->run();
          return;
        } catch (const std::exception& e) {  // no handler should throw; keep serving
          DLOG_ERROR("DC server: io thread caught {}", e.what());
        }
      }
    });
  }
  DLOG_INFO("DC server listening on {}:{}", bound.address().to_string(), bound.port());
  return Status::OK();
}

void DcServer::Impl::DoAccept() {
  asio::io_context& io = *ios_[next_io_++ % ios_.size()];
  acceptor_.async_accept(asio::make_strand(io),
                         [this](const boost::system::error_code& ec, Socket socket) {
                           OnAccept(ec, std::move(socket));
                         });
}

void DcServer::Impl::OnAccept(const boost::system::error_code& ec, Socket socket) {
  if (ec) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    // Out of descriptors, say: try again shortly rather than spin.
    DLOG_WARN("DC server: accept failed: {}", ec.message());
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
  bool refuse = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;  // the socket closes as it goes out of scope
    if (conns_.size() >= options_.max_connections) {
      refuse = true;
    } else {
      const uint64_t id = next_id_++;
      conn = std::make_shared<Connection>(this, id, std::move(socket));
      conns_.emplace(id, conn);
    }
  }
  if (refuse) {
    refused_.fetch_add(1);
    DLOG_WARN("DC server: refusing a connection: {} open, the limit", options_.max_connections);
    boost::system::error_code ignored;
    socket.close(ignored);
  } else {
    asio::post(conn->strand(), [conn] { conn->Start(); });
  }
  DoAccept();
}

void DcServer::Impl::Unregister(uint64_t id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    conns_.erase(id);
  }
  conns_changed_.notify_all();
}

std::optional<std::string> DcServer::Impl::Process(std::string& payload) {
  auto* data = reinterpret_cast<uint8_t*>(payload.data());
  const auto size = static_cast<uint32_t>(payload.size());
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
      std::shared_ptr<TMemoryBuffer>& out = ReplyBuffer();  // replies are checked below
      auto iprot = std::make_shared<TBinaryProtocol>(in, options_.string_limit,
                                                     options_.container_limit, true, true);
      auto oprot = std::make_shared<TBinaryProtocol>(out);
      processor_->process(iprot, oprot, nullptr);
      std::string reply = out->getBufferAsString();
      if (reply.size() > kKeptReplyBuffer) out.reset();  // do not hold on to a rare big one
      if (reply.size() > options_.max_frame_size) {
        return TypedErrorReply(name, seqid,
                               Status::TooLarge(fmt::format("reply of {} bytes over the frame limit of {}",
                                                            reply.size(), options_.max_frame_size)));
      }
      return reply;
    } catch (const TProtocolException& e) {
      if (have_header && e.getType() == TProtocolException::SIZE_LIMIT && IsKnownMethod(name)) {
        return TypedErrorReply(name, seqid, Status::TooLarge(fmt::format("request: {}", e.what())));
      }
      return ApplicationErrorReply(name, seqid, TApplicationException::PROTOCOL_ERROR,
                                   fmt::format("malformed request: {}", e.what()));
    } catch (const TTransportException& e) {  // the payload ended inside the message
      return ApplicationErrorReply(name, seqid, TApplicationException::PROTOCOL_ERROR,
                                   fmt::format("truncated request: {}", e.what()));
    } catch (const std::exception& e) {
      DLOG_WARN("DC server: request failed: {}", e.what());
      return ApplicationErrorReply(name, seqid, TApplicationException::INTERNAL_ERROR, e.what());
    }
  } catch (...) {  // building the error reply itself failed (out of memory)
    return std::nullopt;
  }
}

void DcServer::Impl::Stop() {
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
    conns_changed_.wait(l, [this] { return conns_.empty(); });
  }
  workers_->join();  // DataComponent calls in progress return
  work_.clear();     // io threads return once the last handlers ran
  for (std::thread& t : io_threads_) t.join();
  io_threads_.clear();
  DLOG_INFO("DC server on port {} stopped", port_.load());
}

DcServer::DcServer(DataComponent* dc, DcServerOptions options)
    : impl_(std::make_unique<Impl>(dc, std::move(options))) {}

DcServer::~DcServer() { impl_->Stop(); }

Status DcServer::Start() { return impl_->Start(); }
void DcServer::Stop() { impl_->Stop(); }
uint16_t DcServer::port() const { return impl_->port(); }
size_t DcServer::connections() const { return impl_->connections(); }
uint64_t DcServer::refused_connections() const { return impl_->refused(); }

}  // namespace deuteron::dc
