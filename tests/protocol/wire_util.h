// Test helpers for the DC wire protocol: raw TCP sockets (client and a tiny
// scripted server), framing, and Thrift messages crafted or decoded by hand
// with the generated types over TMemoryBuffer + TBinaryProtocol.
//
// Thread safety: a RawSocket is used by one thread at a time; a RawServer
// runs its script on its own thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "DataComponentService.h"

namespace deuteron::testing {

class RawSocket {
 public:
  RawSocket() = default;
  explicit RawSocket(int fd) : fd_(fd) {}
  ~RawSocket() { Close(); }
  RawSocket(RawSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawSocket& operator=(RawSocket&& o) noexcept {
    if (this != &o) {
      Close();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }

  // A connected socket, or one with valid() false. A nonzero `rcvbuf` caps
  // the socket's receive buffer (set before connecting, so the window is
  // sized from it): a peer that never reads then stalls the server after a
  // few replies instead of after the megabytes loopback autotuning allows.
  static RawSocket Connect(uint16_t port, int rcvbuf = 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return RawSocket();
    if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return RawSocket();
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return RawSocket(fd);
  }

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }

  bool WriteAll(std::string_view bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Exactly n bytes, or nullopt on EOF, error or timeout.
  std::optional<std::string> ReadExact(size_t n, int timeout_ms = 5000) {
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (out.size() < n) {
      if (!WaitReadable(deadline)) return std::nullopt;
      char buf[65536];
      const size_t want = std::min(sizeof(buf), n - out.size());
      const ssize_t r = ::recv(fd_, buf, want, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return std::nullopt;
      out.append(buf, static_cast<size_t>(r));
    }
    return out;
  }

  // One frame's payload.
  std::optional<std::string> ReadFrame(int timeout_ms = 5000) {
    auto header = ReadExact(4, timeout_ms);
    if (!header) return std::nullopt;
    const auto* u = reinterpret_cast<const unsigned char*>(header->data());
    const uint32_t len = (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
    if (len == 0) return std::string();
    return ReadExact(len, timeout_ms);
  }

  // True when the peer closes (EOF or reset) within the timeout; bytes that
  // arrive first are discarded.
  bool WaitClosed(int timeout_ms = 5000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (!WaitReadable(deadline)) return false;
      char buf[4096];
      const ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return true;
    }
  }

 private:
  bool WaitReadable(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno == EINTR) continue;
      return r > 0;
    }
  }

  int fd_ = -1;
};

// Listens on 127.0.0.1 (ephemeral port) and runs `script` on each accepted
// connection, one at a time, on its own thread, until destroyed.
class RawServer {
 public:
  using Script = std::function<void(RawSocket&)>;

  explicit RawServer(Script script) : script_(std::move(script)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }

  ~RawServer() {
    stop_.store(true);
    thread_.join();
    ::close(listen_fd_);
  }

  uint16_t port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  void Loop() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      accepted_.fetch_add(1);
      RawSocket s(fd);
      script_(s);
    }
  }

  Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// A port nothing listens on (bound once, then released).
inline uint16_t UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline std::string Frame(std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string out = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
  out.append(payload);
  return out;
}

// Replaces the first occurrence of `from` in *s (to tamper with encoded
// bytes); false when there is none.
inline bool ReplaceOnce(std::string* s, std::string_view from, std::string_view to) {
  const size_t at = s->find(from);
  if (at == std::string::npos) return false;
  s->replace(at, from.size(), to);
  return true;
}

// A message: header (name, type, seqid) then `body` written as a struct
// (a generated *_args or *_result, or any TBase).
template <typename Body>
std::string EncodeMessage(const std::string& name, apache::thrift::protocol::TMessageType type,
                          int32_t seqid, const Body& body) {
  auto buf = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  apache::thrift::protocol::TBinaryProtocol p(buf);
  p.writeMessageBegin(name, type, seqid);
  body.write(&p);
  p.writeMessageEnd();
  return buf->getBufferAsString();
}

template <typename Args>
std::string EncodeCall(const std::string& name, int32_t seqid, const Args& args) {
  return EncodeMessage(name, apache::thrift::protocol::T_CALL, seqid, args);
}

// Whole frames of two DC calls the server tests send by hand: a get of
// `key`, and a multiGet of `copies` times `key`.
inline std::string GetFrame(int32_t seqid, const std::string& key) {
  protocol::DataComponentService_get_args args;
  args.key = key;
  return Frame(EncodeCall("get", seqid, args));
}
inline std::string MultiGetFrame(int32_t seqid, const std::string& key, size_t copies) {
  protocol::DataComponentService_multiGet_args args;
  args.keys.assign(copies, key);
  return Frame(EncodeCall("multiGet", seqid, args));
}

// A decoded reply: the header, and either the application exception
// (type T_EXCEPTION) or the result struct R (a generated *_result).
template <typename R>
struct Reply {
  std::string name;
  apache::thrift::protocol::TMessageType type = apache::thrift::protocol::T_REPLY;
  int32_t seqid = 0;
  apache::thrift::TApplicationException app;
  R result;
};

template <typename R>
Reply<R> DecodeReply(const std::string& payload) {
  auto buf = std::make_shared<apache::thrift::transport::TMemoryBuffer>(
      reinterpret_cast<uint8_t*>(const_cast<char*>(payload.data())),
      static_cast<uint32_t>(payload.size()));
  apache::thrift::protocol::TBinaryProtocol p(buf);
  Reply<R> r;
  p.readMessageBegin(r.name, r.type, r.seqid);
  if (r.type == apache::thrift::protocol::T_EXCEPTION) {
    r.app.read(&p);
  } else {
    r.result.read(&p);
  }
  return r;
}

}  // namespace deuteron::testing
