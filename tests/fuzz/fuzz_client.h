// What the request fuzzers (dc_request_fuzz, tc_request_fuzz) share: the
// input format and a blocking loopback client that sends an input's
// requests on a fresh connection and waits for the reply to a sentinel call
// sent after them.
//
// Input format: a sequence of chunks, each a 2-byte big-endian length and
// that many bytes of request payload (a binary Thrift message); a length past
// the input's end takes what is left, and an empty payload is skipped. The
// client frames each payload itself, so every request reaches the service's
// decoder (the framing layer has its own fuzzer, server_frame_fuzz).
//
// A server that closes the connection, or does not answer the sentinel
// within kReplyDeadline, is a finding: the client aborts (libFuzzer saves
// the input).
//
// Both targets also share their servers' common limits (SetServerLimits),
// how an input is served (ServeInput: start the server, send, wait for the
// sentinel's reply, stop) and their LLVMFuzzerInitialize
// (InitializeRequestFuzzer: quiet logs, or write the seed corpus).
//
// Thread safety: functions over their arguments; one thread per client.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "common/logging.h"
#include "protocol/server/framed_server.h"
#include "protocol/server/wire.h"

namespace deuteron::fuzz {

inline constexpr int32_t kSentinelSeqid = 0x5EED;
inline constexpr size_t kMaxRequests = 64;
inline constexpr std::chrono::seconds kReplyDeadline{20};

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "fuzz client: %s\n", what.c_str());
  std::abort();
}

// The input's request payloads.
inline std::vector<std::string_view> SplitRequests(const uint8_t* data, size_t size) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at + 2 <= size && out.size() < kMaxRequests) {
    const size_t len = std::min<size_t>((size_t{data[at]} << 8) | data[at + 1], size - at - 2);
    at += 2;
    if (len > 0) out.emplace_back(reinterpret_cast<const char*>(data) + at, len);
    at += len;
  }
  return out;
}

// One chunk of the input format around `payload`.
inline std::string Chunk(std::string_view payload) {
  std::string c(2, '\0');
  c[0] = static_cast<char>(payload.size() >> 8);
  c[1] = static_cast<char>(payload.size() & 0xff);
  return c.append(payload);
}

inline std::string Frame(std::string_view payload) {
  std::string f(server::kFrameHeader, '\0');
  server::PutBigEndian32(reinterpret_cast<uint8_t*>(f.data()), static_cast<uint32_t>(payload.size()));
  return f.append(payload);
}

// The payload of a call of `method` with generated argument struct `args`.
template <typename Args>
std::string CallPayload(const std::string& method, int32_t seqid, const Args& args) {
  auto buf = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  apache::thrift::protocol::TBinaryProtocol p(buf);
  p.writeMessageBegin(method, apache::thrift::protocol::T_CALL, seqid);
  args.write(&p);
  p.writeMessageEnd();
  return buf->getBufferAsString();
}

// The sentinel: a whole frame calling `method` (one that always answers)
// with seqid kSentinelSeqid.
template <typename Args>
std::string SentinelFrame(const std::string& method, const Args& args) {
  return Frame(CallPayload(method, kSentinelSeqid, args));
}

// The limits both targets' servers share: one I/O thread, 1 MiB frames,
// 8 MiB of requests in memory, 4096 elements to a container, a frame's
// deadline 10 s and an idle connection's 30 s. The worker threads, string
// limit and name are each target's.
inline void SetServerLimits(server::ServerOptions* o) {
  o->io_threads = 1;
  o->max_frame_size = 1 << 20;
  o->request_memory_limit = 8 << 20;
  o->container_limit = 4096;
  o->frame_deadline = std::chrono::seconds(10);
  o->idle_timeout = std::chrono::seconds(30);
}

// For LLVMFuzzerInitialize: logs errors only; with
// DEUTERON_FUZZ_WRITE_SEEDS=<dir>, writes every (name, input) of `seeds()`
// into <dir> and exits (tests/fuzz/make_corpus.py runs it).
template <typename SeedsFn>
void InitializeRequestFuzzer(SeedsFn seeds) {
  SetLogLevel(LogLevel::kError);
  const char* dir = std::getenv("DEUTERON_FUZZ_WRITE_SEEDS");
  if (dir == nullptr) return;
  for (const auto& [name, seed] : seeds()) {
    FILE* f = std::fopen((std::string(dir) + "/" + name).c_str(), "wb");
    if (f == nullptr || std::fwrite(seed.data(), 1, seed.size(), f) != seed.size()) Die("write seed");
    std::fclose(f);
  }
  std::exit(0);
}

inline int Connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINTR) Die(std::string("connect: ") + std::strerror(errno));
    // Interrupted (libFuzzer's timer): the connection goes on; wait for it.
    pollfd p{fd, POLLOUT, 0};
    while (::poll(&p, 1, -1) < 0) {
      if (errno != EINTR) Die("poll for connect");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) Die("connect (after EINTR)");
  }
  // Close with a reset: hundreds of connections a second would otherwise
  // fill the ephemeral ports with TIME_WAIT.
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  return fd;
}

// Sends every payload of `requests` framed, then `sentinel` (a whole
// frame), on a fresh connection, and reads replies until the sentinel's.
// Returns the replies' payloads, the sentinel's last.
inline std::vector<std::string> RoundTrip(uint16_t port, const std::vector<std::string_view>& requests,
                                          const std::string& sentinel, std::string_view sentinel_method) {
  const int fd = Connect(port);
  std::string out;
  for (std::string_view r : requests) out += Frame(r);
  out += sentinel;
  std::vector<std::string> replies;
  std::string in;
  size_t sent = 0;
  const auto end = std::chrono::steady_clock::now() + kReplyDeadline;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) Die("no reply to the sentinel within the deadline (a hang)");
    pollfd p{fd, static_cast<int16_t>(POLLIN | (sent < out.size() ? POLLOUT : 0)), 0};
    // libFuzzer's timer (SIGALRM, for -timeout) interrupts system calls.
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0) {
      if (errno == EINTR) continue;
      Die("poll");
    }
    if ((p.revents & POLLOUT) != 0 && sent < out.size()) {
      const ssize_t w = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) sent += static_cast<size_t>(w);
    }
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    char buf[65536];
    const ssize_t r = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      Die("the server closed the connection before answering the sentinel");
    }
    if (r < 0) continue;
    in.append(buf, static_cast<size_t>(r));
    while (in.size() >= server::kFrameHeader) {
      const uint32_t len = server::GetBigEndian32(in.data());
      if (in.size() < server::kFrameHeader + len) break;
      std::string payload = in.substr(server::kFrameHeader, len);
      in.erase(0, server::kFrameHeader + len);
      const std::optional<std::string_view> name = server::PeekMethod(payload);
      const bool is_sentinel = name && *name == sentinel_method && payload.size() >= 8 + name->size() + 4 &&
                               static_cast<int32_t>(server::GetBigEndian32(payload.data() + 8 + name->size())) ==
                                   kSentinelSeqid;
      replies.push_back(std::move(payload));
      if (is_sentinel) {
        ::close(fd);
        return replies;
      }
    }
  }
}

// Serves one input: starts `server` (a DcServer or TcServer, not started),
// sends the input's requests and then `sentinel`, a call of
// `sentinel_method`, on a fresh connection, waits for the sentinel's reply
// and stops the server.
template <typename Server>
void ServeInput(Server& server, const uint8_t* data, size_t size, const std::string& sentinel,
                std::string_view sentinel_method) {
  if (!server.Start().ok()) Die("start the server");
  RoundTrip(server.port(), SplitRequests(data, size), sentinel, sentinel_method);
  server.Stop();
}

}  // namespace deuteron::fuzz
