// RpcProxy: a fault-injecting TCP proxy for the TC-to-DC hop, used by the
// crash harness (`deuteron crashtest --faults rpc`) and its tests. It sits
// between a TC (which connects to the proxy as if it were the DC) and a DC
// server, and forwards framed binary Thrift (4-byte big-endian length, then
// the payload; protocol/protocol.md) frame by frame, choosing for each frame
// from a seeded generator whether to delay, drop, reset or duplicate it.
// tc/crash/proxy/proxy.md says what each fault does on the wire and what the
// TC sees.
//
// Shape: one Boost.Asio event loop on one thread owns every socket, timer and
// connection; an accepted connection gets its own connection to the current
// target, and carries calls strictly in turn (a request from the TC, then
// the DC's reply). The proxy never parses payloads: garbage is forwarded as
// is, and a frame of length zero or over kMaxFrameSize closes that
// connection pair (bounded memory: a pair holds at most three frames).
//
// Thread safety: every method may be called from any thread. Stop is
// idempotent, closes every connection and joins the loop; the destructor
// calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace deuteron::crash {

// Per-frame fault probabilities, each in [0, 1]. For every frame one fault
// at most is chosen, in this order: reset, drop, duplicate (requests only),
// delay. Delay and duplicate do not end the connection; drop and reset do.
struct ProxyFaults {
  double delay_p = 0;                      // hold the frame for up to max_delay
  std::chrono::milliseconds max_delay{20};
  double drop_p = 0;       // do not deliver the frame; close both sides (FIN)
  double reset_p = 0;      // close both sides with SO_LINGER 0 (RST)
  double duplicate_p = 0;  // a request again, late (before the next one); its reply discarded
  uint64_t seed = 1;       // connection i draws from Random64(f(seed, i))
};

// What the proxy did since Start; a snapshot.
struct ProxyCounts {
  uint64_t frames = 0;      // frames read from either side
  uint64_t delayed = 0;
  uint64_t dropped = 0;
  uint64_t reset = 0;
  uint64_t duplicated = 0;  // copies sent
  // Additions beyond the harness contract (appended; the above keep order).
  uint64_t connections = 0;  // connection pairs accepted
  uint64_t bad_frames = 0;   // length zero or over kMaxFrameSize: pair closed
  uint64_t connect_failures = 0;  // the target refused or was unreachable
};

class RpcProxy {
 public:
  // The largest payload forwarded (as the servers' default frame limit).
  static constexpr uint32_t kMaxFrameSize = 64u << 20;

  // Listens on listen_host:listen_port (0: an ephemeral port, see port()) and
  // forwards to target_host:target_port. InvalidArgument for probabilities
  // outside [0, 1] or an unresolvable host; Busy when the port is in use;
  // IOError for other socket failures.
  static Result<std::unique_ptr<RpcProxy>> Start(const std::string& listen_host,
                                                 uint16_t listen_port,
                                                 const std::string& target_host,
                                                 uint16_t target_port, ProxyFaults faults);

  ~RpcProxy();
  RpcProxy(const RpcProxy&) = delete;
  RpcProxy& operator=(const RpcProxy&) = delete;

  // The bound port.
  uint16_t port() const;

  // Faults for frames read from now on; connections accepted from now on
  // draw from the new seed. Invalid probabilities are clamped to [0, 1].
  void SetFaults(const ProxyFaults& faults);

  // Where connections accepted from now on go (the DC restarted on a new
  // port); connections open now keep their target until they close.
  void SetTarget(const std::string& host, uint16_t port);

  ProxyCounts counts() const;

  // Stops accepting, closes every connection and joins the loop's thread.
  void Stop();

  // Opaque; public only so helpers in rpc_proxy.cpp can name it.
  class Impl;

 private:
  explicit RpcProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deuteron::crash
