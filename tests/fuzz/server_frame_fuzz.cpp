// libFuzzer target for the server layer's frame decoding: each input is a
// byte stream sent on a fresh connection to a FramedServer (over a small
// DataComponentService whose handler answers from constants), followed by a
// sentinel `health` call; the target reads replies until the sentinel's, the
// close, or a short timeout. The server must never crash, leak or hang on
// any stream (ASan/UBSan and libFuzzer's own checks). The same bytes also go
// straight to the layer's pure decoders (PeekMethod, AuthenticateReply).
//
// Built only by scripts/fuzz (clang, -fsanitize=fuzzer); see tests/fuzz/.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "DataComponentService.h"
#include "common/logging.h"
#include "protocol/errors.h"
#include "protocol/server/framed_server.h"
#include "protocol/server/service.h"
#include "protocol/server/wire.h"

namespace {

namespace proto = ::deuteron::protocol;
namespace server = ::deuteron::server;

constexpr int32_t kSentinelSeqid = 0x5EED;

class Handler final : public proto::DataComponentServiceIf {
 public:
  void apply(proto::ApplyResult& out, const proto::ApplyRequest& request) override {
    out.applied = static_cast<int32_t>(request.ops.size());
  }
  void get(proto::ReadResult& out, const std::string& key, const proto::ReadFence&) override {
    out.found = !key.empty();
    out.value = key;
  }
  void multiGet(std::vector<proto::ReadResult>& out, const std::vector<std::string>& keys,
                const proto::ReadFence&) override {
    for (const std::string& k : keys) {
      proto::ReadResult r;
      r.found = true;
      r.value = k == "big" ? std::string(4096, 'v') : k;
      const deuteron::Status s = server::ChargeReply(r.value.size() + 24);
      if (!s.ok()) throw proto::ToDeuteronError(s);
      out.push_back(std::move(r));
    }
  }
  void scan(proto::ScanResult& out, const proto::ScanRequest& request, const proto::ReadFence&) override {
    for (int i = 0; i < std::min(request.limit, 16); ++i) {
      proto::ScanItem item;
      item.key = std::to_string(i);
      out.items.push_back(item);
    }
  }
  void setEsl(const int64_t esl, const int64_t) override {
    if (esl < 0) throw proto::ToDeuteronError(deuteron::Status::InvalidArgument("negative ESL"));
  }
  void proposeRssp(const int64_t, const int64_t) override {}
  void restartTo(proto::DcReady& out, const int64_t stable_end, const std::string&) override {
    out.rssp = stable_end;
  }
  void stats(proto::DcStats& out) override { out.applies = 1; }
  void health(proto::DcHealth& out) override { out.state = proto::DcState::SERVING; }
  void authenticate(const std::string&) override {}
};

class FuzzService final : public server::Service {
 public:
  std::shared_ptr<apache::thrift::TProcessor> processor() override {
    return std::make_shared<proto::DataComponentServiceProcessor>(std::make_shared<Handler>());
  }
  bool RunsInline(std::string_view method) const override { return method != "proposeRssp"; }
  bool IsKnownMethod(std::string_view method) const override {
    return method == "apply" || method == "get" || method == "multiGet" || method == "scan" ||
           method == "setEsl" || method == "proposeRssp" || method == "restartTo" ||
           method == "stats" || method == "health" || method == "authenticate";
  }
};

struct Harness {
  Harness() : server(&service, Options()) {
    deuteron::SetLogLevel(deuteron::LogLevel::kError);  // a line per bad frame otherwise
    if (!server.Start().ok()) std::abort();
  }
  static server::ServerOptions Options() {
    server::ServerOptions o;
    o.io_threads = 1;
    o.worker_threads = 1;
    o.max_frame_size = 64 * 1024;
    o.request_memory_limit = 1 << 20;
    o.string_limit = 16 * 1024;
    o.container_limit = 1024;
    o.frame_deadline = std::chrono::milliseconds(5);
    o.idle_timeout = std::chrono::milliseconds(2000);
    o.name = "fuzz server";
    return o;
  }
  FuzzService service;
  server::FramedServer server;
};

std::string SentinelFrame() {
  static const std::string frame = [] {
    proto::DataComponentService_health_args args;
    auto buf = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
    apache::thrift::protocol::TBinaryProtocol p(buf);
    p.writeMessageBegin("health", apache::thrift::protocol::T_CALL, kSentinelSeqid);
    args.write(&p);
    p.writeMessageEnd();
    const std::string payload = buf->getBufferAsString();
    std::string f(4, '\0');
    server::PutBigEndian32(reinterpret_cast<uint8_t*>(f.data()), static_cast<uint32_t>(payload.size()));
    return f + payload;
  }();
  return frame;
}

int Connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
  return fd;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads reply frames until the sentinel's, EOF, or the deadline.
void Drain(int fd) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  std::string in;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
    char buf[65536];
    const ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) return;
    in.append(buf, static_cast<size_t>(r));
    while (in.size() >= 4) {
      const uint32_t len = server::GetBigEndian32(in.data());
      if (in.size() < 4 + len) break;
      const std::string_view payload(in.data() + 4, len);
      if (auto name = server::PeekMethod(payload); name && *name == "health" && payload.size() >= 8 + name->size() + 4) {
        const uint32_t seqid = server::GetBigEndian32(payload.data() + 8 + name->size());
        if (static_cast<int32_t>(seqid) == kSentinelSeqid) return;
      }
      in.erase(0, 4 + len);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* harness = new Harness();  // lives for the process
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  // The pure decoders, in process.
  (void)server::PeekMethod(bytes);
  const std::string secret = "fuzz-secret";
  (void)server::AuthenticateReply(bytes, &secret);

  // The server, over a socket.
  const int fd = Connect(harness->server.port());
  const std::string sentinel = SentinelFrame();
  if (WriteAll(fd, bytes.data(), bytes.size())) WriteAll(fd, sentinel.data(), sentinel.size());
  Drain(fd);
  ::close(fd);
  return 0;
}
