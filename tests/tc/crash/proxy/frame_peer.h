// Test helpers for the RPC proxy (tc/crash/proxy/rpc_proxy.h): a tiny framed
// echo server, and a blocking framed client. Frames are as the proxy
// forwards them: a 4-byte big-endian length, then the payload.
//
// EchoServer answers each request frame with one reply frame: its tag byte
// followed by the request's payload, and records every request it got in
// order. FrameClient sends a frame and reads one, with a receive timeout, and
// says how a read ended (a frame, end of stream, a reset, a timeout).
//
// Thread safety: EchoServer's accessors may be called from any thread; a
// FrameClient is used by one thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace deuteron::test {

inline bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// How a read ended.
enum class ReadEnd { kFrame, kEof, kReset, kTimeout, kError };

inline ReadEnd ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return ReadEnd::kEof;
    if (r < 0) {
      if (errno == ECONNRESET) return ReadEnd::kReset;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadEnd::kTimeout;
      return ReadEnd::kError;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return ReadEnd::kFrame;
}

inline std::string Framed(const std::string& payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string f(4, '\0');
  f[0] = static_cast<char>(n >> 24);
  f[1] = static_cast<char>(n >> 16);
  f[2] = static_cast<char>(n >> 8);
  f[3] = static_cast<char>(n);
  return f + payload;
}

// Reads one frame's payload into *payload.
inline ReadEnd ReadFrame(int fd, std::string* payload) {
  unsigned char h[4];
  const ReadEnd e = ReadAll(fd, reinterpret_cast<char*>(h), 4);
  if (e != ReadEnd::kFrame) return e;
  const uint32_t n = (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | h[3];
  if (n > (64u << 20)) return ReadEnd::kError;
  payload->assign(n, '\0');
  return ReadAll(fd, payload->data(), n);
}

class EchoServer {
 public:
  explicit EchoServer(char tag = 'A') : tag_(tag) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listen_fd_ >= 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(listen_fd_, 64) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~EchoServer() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopped_) return;
      stopped_ = true;
      for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    ::shutdown(listen_fd_, SHUT_RDWR);
    accept_thread_.join();
    for (std::thread& t : conn_threads_) t.join();
    for (int fd : conn_fds_) ::close(fd);
    ::close(listen_fd_);
  }

  uint16_t port() const { return port_; }
  // Every request payload received, in arrival order (all connections).
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> l(mu_);
    return requests_;
  }
  size_t connections() const {
    std::lock_guard<std::mutex> l(mu_);
    return conn_fds_.size();
  }

 private:
  void AcceptLoop() {
    for (;;) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      std::lock_guard<std::mutex> l(mu_);
      if (stopped_) {
        ::close(fd);
        return;
      }
      conn_fds_.push_back(fd);
      conn_threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }
  void Serve(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::string payload;
    while (ReadFrame(fd, &payload) == ReadEnd::kFrame) {
      {
        std::lock_guard<std::mutex> l(mu_);
        requests_.push_back(payload);
      }
      const std::string reply = Framed(std::string(1, tag_) + payload);
      if (!WriteAll(fd, reply.data(), reply.size())) break;
    }
    ::shutdown(fd, SHUT_RDWR);  // closed in Stop, so the fd is never reused early
  }

  const char tag_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  mutable std::mutex mu_;
  bool stopped_ = false;
  std::vector<int> conn_fds_;
  std::vector<std::thread> conn_threads_;
  std::vector<std::string> requests_;
};

class FrameClient {
 public:
  explicit FrameClient(uint16_t port, int timeout_ms = 5000) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  }
  ~FrameClient() { ::close(fd_); }

  bool SendRaw(const std::string& bytes) { return WriteAll(fd_, bytes.data(), bytes.size()); }
  bool Send(const std::string& payload) { return SendRaw(Framed(payload)); }
  ReadEnd Receive(std::string* payload) { return ReadFrame(fd_, payload); }
  // One call: send, then read the reply. A send that fails reads what the
  // connection says (end of stream or a reset).
  ReadEnd Call(const std::string& payload, std::string* reply) {
    (void)Send(payload);
    return Receive(reply);
  }

 private:
  int fd_ = -1;
};

}  // namespace deuteron::test
