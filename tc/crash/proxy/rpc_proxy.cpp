#include "tc/crash/proxy/rpc_proxy.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fcntl.h>

#include <boost/asio.hpp>
#include <fmt/format.h>

#include "common/random.h"

namespace deuteron::crash {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

double Clamp01(double p) {
  if (!(p >= 0)) return 0;  // NaN too
  return std::min(p, 1.0);
}

ProxyFaults Sanitized(ProxyFaults f) {
  f.delay_p = Clamp01(f.delay_p);
  f.drop_p = Clamp01(f.drop_p);
  f.reset_p = Clamp01(f.reset_p);
  f.duplicate_p = Clamp01(f.duplicate_p);
  if (f.max_delay.count() < 0) f.max_delay = std::chrono::milliseconds(0);
  return f;
}

bool Valid(double p) { return p >= 0 && p <= 1; }

// One endpoint for host:port; nullopt when the name does not resolve.
std::optional<tcp::endpoint> Resolve(const std::string& host, uint16_t port) {
  error_code ec;
  const asio::ip::address addr = asio::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(addr, port);
  asio::io_context io;
  tcp::resolver resolver(io);
  const auto results =
      resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) return std::nullopt;
  return results.begin()->endpoint();
}

enum class Fault { kNone, kDelay, kDrop, kReset, kDuplicate };

// Marks a socket close-on-exec. The harness and the tests run the proxy in a
// process that forks and execs the servers: a proxy socket inherited by a
// server would outlive the proxy's close, and the TC on the other end would
// see neither FIN nor RST until its receive timeout (a minute). Asio opens
// sockets without SOCK_CLOEXEC; a fork in the instant between the open and
// this call can still inherit one (the test helpers' children close every
// inherited descriptor too).
void CloseOnExec(int fd) {
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) (void)::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

}  // namespace

class Pair;

class RpcProxy::Impl {
 public:
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread thread_;
  uint16_t port_ = 0;

  mutable std::mutex mu_;
  ProxyFaults faults_;                     // GUARDED_BY(mu_)
  std::optional<tcp::endpoint> target_;    // GUARDED_BY(mu_)
  bool stopped_ = false;                   // GUARDED_BY(mu_)

  // Touched only on the loop's thread.
  std::unordered_set<std::shared_ptr<Pair>> pairs_;
  uint64_t next_pair_ = 0;
  bool closing_ = false;

  std::atomic<uint64_t> frames_{0}, delayed_{0}, dropped_{0}, reset_{0}, duplicated_{0},
      connections_{0}, bad_frames_{0}, connect_failures_{0};

  ProxyFaults faults() const {
    std::lock_guard<std::mutex> lock(mu_);
    return faults_;
  }
  void DoAccept();
  void CloseAll();
};

// One accepted connection from the TC and its own connection to the DC. Every
// member is touched only on the loop's thread; handlers hold a shared_ptr, so
// a Pair lives until its last operation completes after Close.
//
// Calls go strictly in turn: read a request from the client, forward it (a
// duplicate's copy first, if one is kept), read the reply, forward it, read
// the next request. At most one read or write is outstanding per pair, so one
// header buffer serves both sides; a pair holds at most three frames (a
// request, its reply and a kept copy).
class Pair : public std::enable_shared_from_this<Pair> {
 public:
  Pair(RpcProxy::Impl* proxy, tcp::socket client, uint64_t seed)
      : proxy_(proxy), client_(std::move(client)), server_(proxy->io_), timer_(proxy->io_),
        rng_(seed) {}

  void Start(const std::optional<tcp::endpoint>& target) {
    if (!target) {
      proxy_->connect_failures_.fetch_add(1);
      Close(false);
      return;
    }
    error_code open_ec;
    server_.open(target->protocol(), open_ec);
    if (open_ec) {
      proxy_->connect_failures_.fetch_add(1);
      Close(false);
      return;
    }
    CloseOnExec(server_.native_handle());
    server_.async_connect(*target, [self = shared_from_this()](const error_code& ec) {
      if (self->closed_) return;
      if (ec) {
        self->proxy_->connect_failures_.fetch_add(1);
        self->Close(false);
        return;
      }
      error_code ignored;
      self->client_.set_option(tcp::no_delay(true), ignored);
      self->server_.set_option(tcp::no_delay(true), ignored);
      self->ReadRequest();
    });
  }

  // Closes both sockets: with SO_LINGER 0 (the peers get RST) when rst, with
  // a plain close (FIN) otherwise. Idempotent.
  void Close(bool rst) {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    for (tcp::socket* s : {&client_, &server_}) {
      if (!s->is_open()) continue;
      if (rst) s->set_option(asio::socket_base::linger(true, 0), ignored);
      s->close(ignored);
    }
    timer_.cancel();
    request_ = {};
    reply_ = {};
    copy_ = {};
    proxy_->pairs_.erase(shared_from_this());
  }

 private:
  // Reads one frame (length word included) from `from` into *buf, then runs
  // next. A length of zero or over the cap closes the pair.
  template <typename Next>
  void ReadFrame(tcp::socket& from, std::vector<char>* buf, Next next) {
    asio::async_read(
        from, asio::buffer(header_),
        [self = shared_from_this(), &from, buf, next](const error_code& ec, size_t) {
          if (self->closed_) return;
          if (ec) return self->Close(false);
          uint32_t len = 0;
          for (unsigned char b : self->header_) len = (len << 8) | b;
          if (len == 0 || len > RpcProxy::kMaxFrameSize) {
            self->proxy_->bad_frames_.fetch_add(1);
            return self->Close(false);
          }
          buf->resize(4 + size_t{len});
          std::memcpy(buf->data(), self->header_.data(), 4);
          asio::async_read(from, asio::buffer(buf->data() + 4, len),
                           [self, next](const error_code& ec2, size_t) {
                             if (self->closed_) return;
                             if (ec2) return self->Close(false);
                             self->proxy_->frames_.fetch_add(1);
                             next();
                           });
        });
  }

  template <typename Next>
  void Write(tcp::socket& to, const std::vector<char>& buf, Next next) {
    asio::async_write(to, asio::buffer(buf),
                      [self = shared_from_this(), next](const error_code& ec, size_t) {
                        if (self->closed_) return;
                        if (ec) return self->Close(false);
                        next();
                      });
  }

  // One fault at most for a frame, drawn in the order reset, drop,
  // duplicate (requests only), delay.
  Fault Choose(bool request) {
    const ProxyFaults f = proxy_->faults();
    if (f.reset_p > 0 && rng_.NextDouble() < f.reset_p) return Fault::kReset;
    if (f.drop_p > 0 && rng_.NextDouble() < f.drop_p) return Fault::kDrop;
    if (request && f.duplicate_p > 0 && rng_.NextDouble() < f.duplicate_p) return Fault::kDuplicate;
    if (f.delay_p > 0 && rng_.NextDouble() < f.delay_p) return Fault::kDelay;
    return Fault::kNone;
  }

  // Applies a fault to a frame read: runs deliver now, after a delay, or
  // never (drop, reset).
  template <typename Deliver>
  void Apply(Fault fault, Deliver deliver) {
    switch (fault) {
      case Fault::kReset:
        proxy_->reset_.fetch_add(1);
        Close(true);
        break;
      case Fault::kDrop:
        proxy_->dropped_.fetch_add(1);
        Close(false);
        break;
      case Fault::kDelay: {
        proxy_->delayed_.fetch_add(1);
        const auto max = static_cast<uint64_t>(proxy_->faults().max_delay.count());
        timer_.expires_after(std::chrono::milliseconds(rng_.Uniform(max + 1)));
        timer_.async_wait([self = shared_from_this(), deliver](const error_code& ec) {
          if (self->closed_ || ec) return;
          deliver();
        });
        break;
      }
      case Fault::kDuplicate:
      case Fault::kNone:
        deliver();
        break;
    }
  }

  void ReadRequest() {
    ReadFrame(client_, &request_, [self = shared_from_this()] { self->OnRequest(); });
  }

  void OnRequest() {
    const Fault fault = Choose(/*request=*/true);
    Apply(fault, [self = shared_from_this(), keep = fault == Fault::kDuplicate] {
      self->SendCopyThen([self, keep] {
        if (keep) {  // to go again before the next request
          self->copy_ = self->request_;
          self->copy_since_ = std::chrono::steady_clock::now();
        }
        self->Write(self->server_, self->request_, [self] { self->ReadReply(); });
      });
    });
  }

  // A duplicate goes late: the copy of an earlier request is sent just
  // before the pair's next request, so the client has long had the first
  // reply and may have acted on it (committed, released its locks, let
  // another connection write the same keys with newer LSNs). Its reply is
  // read into copy_ and discarded; then `next` runs. A copy older than
  // kMaxCopyAge is forgotten instead.
  template <typename Next>
  void SendCopyThen(Next next) {
    if (copy_.empty()) return next();
    if (std::chrono::steady_clock::now() - copy_since_ > kMaxCopyAge) {
      copy_ = {};
      return next();
    }
    proxy_->duplicated_.fetch_add(1);
    Write(server_, copy_, [self = shared_from_this(), next] {
      self->ReadFrame(self->server_, &self->copy_, [self, next] {
        self->copy_ = {};
        next();
      });
    });
  }

  void ReadReply() {
    ReadFrame(server_, &reply_, [self = shared_from_this()] { self->OnReply(); });
  }

  void OnReply() {
    Apply(Choose(/*request=*/false), [self = shared_from_this()] {
      self->Write(self->client_, self->reply_, [self] { self->ReadRequest(); });
    });
  }

  static constexpr std::chrono::seconds kMaxCopyAge{1};

  RpcProxy::Impl* proxy_;
  tcp::socket client_;
  tcp::socket server_;
  asio::steady_timer timer_;
  Random64 rng_;
  std::array<unsigned char, 4> header_{};
  std::vector<char> request_;
  std::vector<char> reply_;
  std::vector<char> copy_;  // a duplicate to send before the next request; empty: none
  std::chrono::steady_clock::time_point copy_since_;
  bool closed_ = false;
};

void RpcProxy::Impl::DoAccept() {
  acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
    if (closing_ || !acceptor_.is_open()) return;
    if (!ec) {
      CloseOnExec(socket.native_handle());
      ProxyFaults f;
      std::optional<tcp::endpoint> target;
      {
        std::lock_guard<std::mutex> lock(mu_);
        f = faults_;
        target = target_;
      }
      uint64_t state = f.seed + 0x9e3779b97f4a7c15u * ++next_pair_;
      auto pair = std::make_shared<Pair>(this, std::move(socket), Random64::SplitMix64(&state));
      pairs_.insert(pair);
      connections_.fetch_add(1);
      pair->Start(target);
    }
    // An accept error (EMFILE, an aborted handshake) ends no one: go on.
    DoAccept();
  });
}

void RpcProxy::Impl::CloseAll() {
  closing_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  std::vector<std::shared_ptr<Pair>> pairs(pairs_.begin(), pairs_.end());
  for (auto& p : pairs) p->Close(false);
}

RpcProxy::RpcProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RpcProxy::~RpcProxy() { Stop(); }

Result<std::unique_ptr<RpcProxy>> RpcProxy::Start(const std::string& listen_host,
                                                  uint16_t listen_port,
                                                  const std::string& target_host,
                                                  uint16_t target_port, ProxyFaults faults) {
  if (!Valid(faults.delay_p) || !Valid(faults.drop_p) || !Valid(faults.reset_p) ||
      !Valid(faults.duplicate_p)) {
    return Status::InvalidArgument("rpc proxy: fault probabilities must lie in [0, 1]");
  }
  if (faults.max_delay.count() < 0) {
    return Status::InvalidArgument("rpc proxy: max_delay must not be negative");
  }
  auto target = Resolve(target_host, target_port);
  if (!target) {
    return Status::InvalidArgument(fmt::format("rpc proxy: cannot resolve {}", target_host));
  }
  auto listen = Resolve(listen_host, listen_port);
  if (!listen) {
    return Status::InvalidArgument(fmt::format("rpc proxy: cannot resolve {}", listen_host));
  }
  auto impl = std::make_unique<Impl>();
  impl->faults_ = faults;
  impl->target_ = target;
  error_code ec;
  const std::string where = fmt::format("{}:{}", listen_host, listen_port);
  auto fail = [&](const char* what) -> Status {
    error_code ignored;
    impl->acceptor_.close(ignored);
    const std::string msg = fmt::format("rpc proxy: {} {}: {}", what, where, ec.message());
    if (ec == asio::error::address_in_use) return Status::Busy(msg);
    return Status::IOError(msg);
  };
  impl->acceptor_.open(listen->protocol(), ec);
  if (ec) return fail("open socket for");
  CloseOnExec(impl->acceptor_.native_handle());
  impl->acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (ec) return fail("set SO_REUSEADDR on");
  impl->acceptor_.bind(*listen, ec);
  if (ec) return fail("bind");
  impl->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen on");
  const tcp::endpoint bound = impl->acceptor_.local_endpoint(ec);
  if (ec) return fail("read the address of");
  impl->port_ = bound.port();

  impl->work_.emplace(asio::make_work_guard(impl->io_));
  Impl* raw = impl.get();
  asio::post(impl->io_, [raw] { raw->DoAccept(); });
  impl->thread_ = std::thread([raw] {
    for (;;) {
      try {
        raw->io_.run();
        return;
      } catch (const std::exception&) {  // no handler throws; keep the loop alive
      }
    }
  });
  return std::unique_ptr<RpcProxy>(new RpcProxy(std::move(impl)));
}

uint16_t RpcProxy::port() const { return impl_->port_; }

void RpcProxy::SetFaults(const ProxyFaults& faults) {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  impl_->faults_ = Sanitized(faults);
}

void RpcProxy::SetTarget(const std::string& host, uint16_t port) {
  auto target = Resolve(host, port);  // unresolvable: new connections fail
  std::lock_guard<std::mutex> lock(impl_->mu_);
  impl_->target_ = target;
}

ProxyCounts RpcProxy::counts() const {
  const Impl& i = *impl_;
  ProxyCounts c;
  c.frames = i.frames_.load();
  c.delayed = i.delayed_.load();
  c.dropped = i.dropped_.load();
  c.reset = i.reset_.load();
  c.duplicated = i.duplicated_.load();
  c.connections = i.connections_.load();
  c.bad_frames = i.bad_frames_.load();
  c.connect_failures = i.connect_failures_.load();
  return c;
}

void RpcProxy::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu_);
    if (impl_->stopped_) return;
    impl_->stopped_ = true;
  }
  Impl* raw = impl_.get();
  asio::post(raw->io_, [raw] { raw->CloseAll(); });
  raw->work_.reset();
  if (raw->thread_.joinable()) raw->thread_.join();
}

}  // namespace deuteron::crash
