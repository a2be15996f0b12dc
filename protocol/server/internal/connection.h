// Connection: one client connection of a FramedServer
// (protocol/server/framed_server.h). Internal to protocol/server/.
#pragma once

#include "protocol/server/internal/server_impl.h"

namespace deuteron::server::internal {


// One client connection. Every member below is used on strand_ only (the
// socket's and the timer's executor), except the atomics the acceptor reads
// to pick a connection to evict; the workers touch nothing but the payload
// they were handed and the immutable info_, and post the reply back.
//
// Memory accounting (every charge is released exactly once):
//  - raw_: bytes read and not yet assigned to a granted frame (charged as
//    read; each read first reserves kReadChunk, the unused part released);
//  - the frame being read: its whole length, reserved at its length word;
//  - queued requests: their lengths (carried over from the frame);
//  - a running call: its request, plus as much again for the decoded
//    request while it runs (FramedServer::Impl::Process); the reply it
//    builds (CallContext);
//  - replies not yet written: their sizes.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(FramedServer::Impl* server, uint64_t id, Socket socket)
      : server_(server),
        max_frame_(server->options().max_frame_size),
        strand_(socket.get_executor()),
        socket_(std::move(socket)),
        timer_(strand_) {
    info_.id = id;
    boost::system::error_code ec;
    const tcp::endpoint peer = socket_.remote_endpoint(ec);
    if (!ec) info_.peer = fmt::format("{}:{}", peer.address().to_string(), peer.port());
    last_request_ns_.store(NowNs());
  }

  const Strand& strand() const { return strand_; }
  uint64_t id() const { return info_.id; }
  int64_t last_request_ns() const { return last_request_ns_.load(std::memory_order_relaxed); }
  bool running() const { return running_.load(std::memory_order_relaxed); }
  // Claimed once, by the acceptor, for eviction.
  bool ClaimEviction() { return !evicting_.exchange(true); }
  bool evicting() const { return evicting_.load(std::memory_order_relaxed); }

  void Start() {
    if (closed_) return;
    boost::system::error_code ec;
    socket_.non_blocking(true, ec);
    if (ec) {
      Close("cannot make the socket nonblocking");
      return;
    }
    if (server_->options().shared_secret.empty()) Open();
    last_request_ = Clock::now();
    ArmTimer();
    MaybeRead();
  }

  void Close(const char* why) {
    if (closed_) return;
    closed_ = true;
    gone_.store(true, std::memory_order_relaxed);
    if (!queue_.empty()) {
      DLOG_DEBUG("{}: connection {}: dropping {} queued requests", name(), info_.id, queue_.size());
    }
    DLOG_DEBUG("{}: closing connection {}: {}", name(), info_.id, why);
    // Give back every byte accounted to this connection but the running
    // call's (released when it returns).
    MemoryGauge& gauge = server_->gauge();
    if (waiting_grant_ != Grant::kNone && gauge.Cancel(ticket_)) waiting_grant_ = Grant::kNone;
    // A grant made already arrives in OnGranted, which releases it.
    size_t release = raw_.size() + queued_bytes_ + out_bytes_ + writing_bytes_;
    if (frame_granted_) release += frame_len_;
    gauge.Release(release);
    raw_.clear();
    frame_.clear();
    frame_granted_ = false;
    queue_.clear();  // never run: their client is gone (a previous TC, say)
    queued_bytes_ = 0;
    out_.clear();
    out_bytes_ = 0;
    writing_bytes_ = 0;  // the buffers stay alive until the write handler runs
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    timer_.cancel();
    server_->MarkClosed(info_.id);
    if (!busy_) FinishClose();
  }

 private:
  enum class Grant { kNone, kRead, kFrame };

  const std::string& name() const { return server_->options().name; }
  size_t PendingOut() const { return out_bytes_ + writing_bytes_; }
  bool secret_required() const { return !server_->options().shared_secret.empty(); }

  void Open() {
    opened_ = true;
    server_->service()->OnConnectionOpen(info_);
  }

  // The close hook runs on a worker once no call for this connection runs;
  // then the server forgets the connection.
  void FinishClose() {
    if (finished_) return;
    finished_ = true;
    asio::post(server_->workers(), [self = shared_from_this()] {
      if (self->opened_) self->server_->service()->OnConnectionClose(self->info_);
      self->server_->Unregister(self->info_.id);
    });
  }

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
    return !closed_ && !reading_ && !peer_eof_ && waiting_grant_ == Grant::kNone &&
           queue_.size() < kMaxQueuedFrames && queued_bytes_ <= max_frame_ &&
           PendingOut() <= kReplySlack;
  }

  void MaybeRead() {
    if (!CanRead()) return;
    reading_ = true;
    socket_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         self->OnReadable(ec);
                       });
  }

  void OnReadable(const boost::system::error_code& ec) {
    if (closed_) return;
    if (ec) {
      reading_ = false;
      Close("read failed");
      return;
    }
    // The rest of a granted frame is read under its grant; anything else
    // first reserves a chunk.
    if (have_len_ && frame_granted_) {
      ReadNow(/*reserved=*/false);
      return;
    }
    if (!server_->gauge().TryReserve(kReadChunk, GrantCallback(Grant::kRead), &ticket_)) {
      waiting_grant_ = Grant::kRead;  // reading_ stays true: no second wait
      return;
    }
    ReadNow(/*reserved=*/true);
  }

  std::function<void()> GrantCallback(Grant kind) {
    return [weak = weak_from_this(), kind] {
      auto self = weak.lock();
      if (!self) return;  // cannot happen while a grant waits: Close cancels it
      asio::post(self->strand_, [self, kind] { self->OnGranted(kind); });
    };
  }

  void OnGranted(Grant kind) {
    MemoryGauge& gauge = server_->gauge();
    if (closed_) {
      gauge.Release(kind == Grant::kRead ? kReadChunk : frame_len_);
      return;
    }
    waiting_grant_ = Grant::kNone;
    if (kind == Grant::kRead) {
      ReadNow(/*reserved=*/true);
      return;
    }
    frame_granted_ = true;
    frame_start_ = Clock::now();  // the deadline counts from when we read on
    ArmTimer();
    Parse();
    AfterInput();
  }

  // Reads what the socket holds: up to kReadChunk reserved before, or (not
  // `reserved`) up to the rest of the granted frame being read, whose grant
  // covers it (so a frame granted is never stuck waiting for memory).
  void ReadNow(bool reserved) {
    MemoryGauge& gauge = server_->gauge();
    boost::system::error_code ec;
    char* buf = ReadBuffer();
    const size_t want =
        reserved ? kReadChunk : std::min<size_t>(kReadChunk, frame_len_ - frame_.size());
    const size_t n = socket_.read_some(asio::buffer(buf, want), ec);
    if (reserved) {
      gauge.Release(kReadChunk - (ec ? 0 : n));
    } else if (!ec) {
      gauge.Charge(n);  // as raw bytes; Parse moves them under the grant
    }
    reading_ = false;
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      MaybeRead();
      return;
    }
    if (ec) {
      if (ec != asio::error::eof) {
        Close("read failed");
        return;
      }
      if (!raw_.empty() || !frame_.empty()) {
        DLOG_WARN("{}: connection {} closed inside a frame", name(), info_.id);
      }
      // The client is gone (a half-close counts as gone): what it queued is
      // dropped, not run on behalf of a client that may have been replaced.
      Close("peer closed");
      return;
    }
    if (!in_frame_) {
      in_frame_ = true;
      frame_start_ = Clock::now();
      ArmTimer();
    }
    raw_.append(buf, n);
    Parse();
    AfterInput();
  }

  void AfterInput() {
    if (closed_) return;
    MaybeDispatch();
    MaybeRead();
    MaybeFinish();
  }

  // Moves raw bytes into frames as far as grants allow; whole frames go to
  // queue_.
  void Parse() {
    size_t pos = 0;
    while (!closed_ && !peer_eof_) {
      if (!have_len_) {
        if (raw_.size() - pos < kFrameHeader) break;
        const uint32_t len = GetBigEndian32(raw_.data() + pos);
        pos += kFrameHeader;
        if (len == 0 || len > max_frame_) {
          DLOG_WARN("{}: connection {} sent a frame of {} bytes (limit {}): closing it", name(),
                    info_.id, len, max_frame_);
          // The stream is out of step: answer what came before, then one
          // typed error (no call to name: method "", seqid 0), then close.
          final_reply_ = BadFrameReply(len, max_frame_);
          peer_eof_ = true;
          pos = raw_.size();
          break;
        }
        have_len_ = true;
        frame_len_ = len;
        frame_granted_ = server_->gauge().TryReserve(len, GrantCallback(Grant::kFrame), &ticket_);
        if (!frame_granted_) {
          waiting_grant_ = Grant::kFrame;
          break;
        }
        frame_.reserve(len);
      }
      if (!frame_granted_) break;
      const size_t take = std::min<size_t>(frame_len_ - frame_.size(), raw_.size() - pos);
      frame_.append(raw_, pos, take);
      pos += take;
      if (frame_.size() < frame_len_) break;
      // A whole request: it carries its grant into the queue.
      queue_.push_back(std::move(frame_));
      frame_ = std::string();
      queued_bytes_ += frame_len_;
      have_len_ = false;
      frame_granted_ = false;
      last_request_ = Clock::now();
      frame_start_ = last_request_;  // the next frame, if bytes of it came, began now
      last_request_ns_.store(NowNs(), std::memory_order_relaxed);
    }
    raw_.erase(0, pos);
    server_->gauge().Release(pos);
    in_frame_ = !raw_.empty() || have_len_;
    if (in_frame_) ArmTimer();
  }

  // Runs the oldest queued request, unless one is in progress (one at a
  // time keeps execution and replies in arrival order).
  void MaybeDispatch() {
    if (closed_ || busy_ || queue_.empty() || PendingOut() > kReplySlack) return;
    if (!reading_ && !peer_eof_ && PeerGone()) {
      Close("peer closed");  // noticed while reading was paused
      return;
    }
    auto payload = std::make_shared<std::string>(std::move(queue_.front()));
    queue_.pop_front();
    const size_t charge = payload->size();
    queued_bytes_ -= charge;
    const std::string_view method = PeekMethod(*payload).value_or(std::string_view());
    if (secret_required() && (!authenticated_ || method == kAuthenticateMethod)) {
      Authenticate(*payload, method);
      server_->gauge().Release(charge);
      return;
    }
    if (method == kAuthenticateMethod) {  // no secret: any token is accepted
      server_->gauge().Release(charge);
      Deliver(AuthenticateReply(*payload, nullptr));
      return;
    }
    busy_ = true;
    running_.store(true, std::memory_order_relaxed);
    if (server_->service()->RunsInline(method)) {
      // Posted, not run here, so that a burst of pipelined reads still lets
      // the strand's reads and writes in between them.
      asio::post(strand_, [self = shared_from_this(), payload = std::move(payload), charge] {
        std::optional<std::string> reply;
        if (!self->closed_) reply = self->server_->Process(self->info_, *payload);
        self->OnProcessed(std::move(reply), charge);
      });
      return;
    }
    // Moved, not copied, into the handler: the request is then owned by the
    // thread that runs it alone, and freed there.
    asio::post(server_->workers(), [self = shared_from_this(), payload = std::move(payload),
                                    charge]() mutable {
      std::optional<std::string> reply;
      if (!self->gone_.load(std::memory_order_relaxed)) {  // not closed while queued
        reply = self->server_->Process(self->info_, *payload);
      }
      payload.reset();
      asio::post(self->strand_, [self, reply = std::move(reply), charge]() mutable {
        self->OnProcessed(std::move(reply), charge);
      });
    });
  }

  // The layer's own answer to `authenticate` and to calls before it.
  void Authenticate(const std::string& payload, std::string_view method) {
    const std::string& secret = server_->options().shared_secret;
    if (method == kAuthenticateMethod) {
      bool ok = false;
      std::string reply = AuthenticateReply(payload, &secret, &ok);
      if (ok) {
        const bool first = !authenticated_;
        authenticated_ = true;
        Deliver(std::move(reply));
        if (first) Open();
        return;
      }
      RefuseAuth(std::move(reply), "wrong token");
      return;
    }
    RefuseAuth(UnauthenticatedReply(payload, "authenticate first: this server requires a token"),
               "call before authenticate");
  }

  void RefuseAuth(std::string reply, const char* why) {
    server_->auth_failures.fetch_add(1);
    DLOG_WARN("{}: connection {} from {}: {}: closing it", name(), info_.id, info_.peer, why);
    final_reply_ = std::move(reply);
    peer_eof_ = true;  // read nothing more; answer, then close
    queue_.clear();
    server_->gauge().Release(queued_bytes_);
    queued_bytes_ = 0;
  }

  void Deliver(std::string frame) {
    last_request_ = Clock::now();
    server_->gauge().Charge(frame.size());
    out_bytes_ += frame.size();
    out_.push_back(std::move(frame));
    if (!writing_) DoWrite();
  }

  void OnProcessed(std::optional<std::string> reply, size_t request_charge) {
    busy_ = false;
    running_.store(false, std::memory_order_relaxed);
    server_->gauge().Release(request_charge);
    if (closed_) {
      FinishClose();
      return;
    }
    if (!reply) {
      Close("could not build a reply");
      return;
    }
    last_request_ = Clock::now();
    last_request_ns_.store(NowNs(), std::memory_order_relaxed);
    Deliver(std::move(*reply));
    AfterInput();
  }

  void DoWrite() {
    writing_ = true;
    write_start_ = Clock::now();
    writing_frames_.clear();
    for (auto& f : out_) writing_frames_.push_back(std::move(f));
    out_.clear();
    writing_bytes_ = out_bytes_;
    out_bytes_ = 0;
    std::vector<asio::const_buffer> buffers;
    buffers.reserve(writing_frames_.size());
    for (const auto& f : writing_frames_) buffers.push_back(asio::buffer(f));
    ArmTimer();
    asio::async_write(socket_, buffers,
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                        self->OnWrite(ec);
                      });
  }

  void OnWrite(const boost::system::error_code& ec) {
    writing_ = false;
    writing_frames_.clear();
    if (closed_) return;
    server_->gauge().Release(writing_bytes_);
    writing_bytes_ = 0;
    if (ec) {
      Close("write failed");
      return;
    }
    if (!out_.empty()) DoWrite();
    AfterInput();
  }

  // After the peer's EOF or a bad frame: close once every request read has
  // been answered.
  void MaybeFinish() {
    if (closed_ || !peer_eof_ || busy_ || !queue_.empty()) return;
    if (final_reply_) {
      std::string last = std::move(*final_reply_);
      final_reply_.reset();
      Deliver(std::move(last));
      return;  // OnWrite comes back here once it is written
    }
    if (!writing_ && out_.empty()) Close("answered the last request");
  }

  // The timer serves three deadlines: idle (no whole request), frame (a
  // frame started and not whole) and write (a reply not taken).
  void ArmTimer() {
    if (closed_) return;
    const ServerOptions& o = server_->options();
    std::optional<Clock::time_point> next;
    auto earliest = [&](Clock::time_point t) { next = next ? std::min(*next, t) : t; };
    if (o.idle_timeout.count() > 0) earliest(last_request_ + o.idle_timeout);
    if (o.frame_deadline.count() > 0) {
      if (in_frame_ && waiting_grant_ != Grant::kFrame) earliest(frame_start_ + o.frame_deadline);
      if (writing_) earliest(write_start_ + o.frame_deadline);
    }
    if (!next) return;
    if (timer_armed_ && armed_for_ <= *next) return;  // it fires first; rearmed then
    timer_armed_ = true;
    armed_for_ = *next;
    timer_.expires_at(*next);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec == asio::error::operation_aborted) return;  // rearmed or closed
      self->OnTimer();
    });
  }

  void OnTimer() {
    timer_armed_ = false;
    if (closed_) return;
    const ServerOptions& o = server_->options();
    const auto now = Clock::now();
    if (o.frame_deadline.count() > 0) {
      if (in_frame_ && waiting_grant_ != Grant::kFrame && now >= frame_start_ + o.frame_deadline) {
        server_->deadline_closed.fetch_add(1);
        DLOG_INFO("{}: connection {}: a frame not whole after {} ms: closing it", name(), info_.id,
                  o.frame_deadline.count());
        Close("frame deadline");
        return;
      }
      if (writing_ && now >= write_start_ + o.frame_deadline) {
        server_->deadline_closed.fetch_add(1);
        DLOG_INFO("{}: connection {}: a reply not taken after {} ms: closing it", name(), info_.id,
                  o.frame_deadline.count());
        Close("reply not read");
        return;
      }
    }
    if (o.idle_timeout.count() > 0) {
      if (busy_) {
        last_request_ = now;  // a call in progress is not idleness
      } else if (now >= last_request_ + o.idle_timeout) {
        server_->idle_closed.fetch_add(1);
        DLOG_INFO("{}: connection {} idle for {} ms: closing it", name(), info_.id,
                  o.idle_timeout.count());
        Close("idle");
        return;
      }
    }
    ArmTimer();
  }

  FramedServer::Impl* const server_;
  ConnectionInfo info_;  // immutable after construction: read by workers
  const uint32_t max_frame_;
  const Strand strand_;
  Socket socket_;
  Timer timer_;
  bool timer_armed_ = false;
  Clock::time_point armed_for_;

  // Reading.
  std::string raw_;            // bytes read, not yet part of a granted frame
  bool have_len_ = false;      // the current frame's length word is read
  uint32_t frame_len_ = 0;
  bool frame_granted_ = false; // its bytes are reserved: reading on
  std::string frame_;          // its payload so far
  bool in_frame_ = false;      // a frame has begun and is not whole
  Clock::time_point frame_start_;
  Grant waiting_grant_ = Grant::kNone;
  uint64_t ticket_ = 0;        // of the waiting grant
  std::deque<std::string> queue_;  // whole request payloads, in arrival order
  size_t queued_bytes_ = 0;
  bool reading_ = false;       // a wait, a read or a read grant is pending
  bool peer_eof_ = false;      // read no more: answer, then close

  // Running and writing.
  bool busy_ = false;  // a call is running
  std::deque<std::string> out_;  // reply frames not yet handed to a write
  size_t out_bytes_ = 0;
  std::vector<std::string> writing_frames_;
  size_t writing_bytes_ = 0;
  bool writing_ = false;
  Clock::time_point write_start_;
  // After a bad frame or a refused token: the last reply, sent once the
  // requests before it are answered; then the connection closes.
  std::optional<std::string> final_reply_;

  Clock::time_point last_request_;  // a whole request arrived or was answered
  bool authenticated_ = false;
  bool opened_ = false;    // OnConnectionOpen ran: OnConnectionClose will
  bool closed_ = false;
  bool finished_ = false;  // FinishClose ran
  // closed_ for the workers: a request handed to one after the close is not run.
  std::atomic<bool> gone_{false};
  // For the acceptor's choice of a connection to evict.
  std::atomic<int64_t> last_request_ns_{0};
  std::atomic<bool> running_{false};
  std::atomic<bool> evicting_{false};
};


}  // namespace deuteron::server::internal
