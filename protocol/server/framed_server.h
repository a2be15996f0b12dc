// FramedServer: the transport and governance layer under every Deuteron
// server. It serves one Service (protocol/server/service.h) over TCP, framed
// binary Thrift as protocol/protocol.md writes down, and owns everything a
// hostile or heavy peer could abuse: framing and its limits, request memory,
// backpressure, connection admission, deadlines and the shared secret. The
// DC server (dc/dc_server.h) is a thin Service over it; the TC server will
// be another.
//
// Shape: Boost.Asio owns the sockets. Each of io_threads runs its own event
// loop; a connection is placed on one loop at accept (round robin) and its
// reads, writes and timer stay there (on its own strand), so a connection's
// events never cross threads. Calls the Service marks RunsInline run on the
// loop; the rest (calls that may wait: an RSSP, a restart, a commit) go to
// worker_threads, so such a call holds one worker, never a loop or another
// connection.
//
// Per connection: frames are read as they arrive (pipelining) and queued;
// requests run one at a time in arrival order and replies go out in that
// order. When the peer closes (end of stream, a half-close included, or a
// reset), the connection closes at once and the requests queued on it are
// dropped unanswered: only a call already running finishes, its reply
// discarded. A frame over max_frame_size or of length zero closes that
// connection after answering what came before it. A well-framed request
// whose payload does not decode gets an error reply and the connection
// stays usable. Bad input never ends the process.
//
// Governance (each limit and its error in protocol/protocol.md, "Limits"):
//  - Request memory: every byte held on a request's behalf (frames being
//    read, requests queued and running, replies being built and not yet
//    sent) counts against request_memory_limit. A frame's bytes are granted
//    when its length word arrives, first come first served; while they do
//    not fit, the server reads no further frames (TCP backpressure) rather
//    than allocate.
//  - A reply is charged while it is built (CallContext) and fails TOO_LARGE
//    before it passes the frame limit. A connection whose peer does not read
//    holds at most one frame limit of unsent replies and is then not read
//    from; a reply the peer does not take within frame_deadline closes it.
//  - Deadlines: a frame must arrive whole within frame_deadline of its
//    first byte; a connection with no whole request for idle_timeout (and
//    no call running) is closed.
//  - Admission: when max_connections are open, a new connection closes the
//    open one that has gone longest without a whole request (a connection
//    counts from its accept; one running a call is never chosen) rather
//    than being refused, so idle or trickling peers never lock out a new
//    client; a busy client's connections are the last to go. Only when
//    every open connection runs a call is the new one closed at once.
//  - Authority: with a shared secret, a connection's first call must be
//    `authenticate(token)` with the secret; anything else, or a wrong
//    token, gets UNAUTHENTICATED and the connection closes. Listening on a
//    non-loopback address without a secret is refused at Start.
//
// Thread safety: Start, Stop and the accessors may be called from any
// thread; Stop is idempotent and is called by the destructor.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "protocol/server/service.h"

namespace deuteron::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // an address (or a name that resolves)
  uint16_t port = 0;               // 0: an ephemeral port; see FramedServer::port()
  int io_threads = 2;              // REQUIRES: >= 1
  int worker_threads = 4;          // REQUIRES: >= 1
  uint32_t max_frame_size = 64u << 20;  // payload bytes; REQUIRES: >= 64
  int32_t string_limit = 16 << 20;      // most bytes in one Thrift string
  int32_t container_limit = 1 << 20;    // most elements in one Thrift list
  // Connections open at once; when full, a new one evicts the longest-idle
  // (or is closed at once when every open one runs a call).
  size_t max_connections = 256;
  // A connection with no whole request for this long is closed, unless a
  // call for it is in progress. Zero: never.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  // A frame must arrive whole within this long of its first byte, and a
  // reply must be taken by the peer within this long. Zero: no deadline.
  std::chrono::milliseconds frame_deadline{std::chrono::seconds(5)};
  // Bytes held on requests' behalf, server-wide. REQUIRES: >= max_frame_size.
  size_t request_memory_limit = size_t{128} << 20;
  // The shared secret clients present with `authenticate`; empty: none.
  // Required when host is not a loopback address.
  std::string shared_secret;
  // Used in log lines ("DC server: ...").
  std::string name = "server";
};

// Counters for tests and stats; a snapshot.
struct ServerStats {
  size_t connections = 0;           // open now
  uint64_t refused_connections = 0; // closed at accept: full, every one running a call
  uint64_t evicted_connections = 0; // closed to admit a new one
  uint64_t idle_closed = 0;         // closed by the idle timeout
  uint64_t deadline_closed = 0;     // closed by the frame deadline
  uint64_t auth_failures = 0;       // closed for a missing or wrong token
  size_t memory_used = 0;           // request memory accounted now
  size_t memory_peak = 0;           // its high-water mark
  size_t memory_limit = 0;
};

class FramedServer {
 public:
  // REQUIRES: service outlives the server (until Stop returns).
  FramedServer(Service* service, ServerOptions options);
  ~FramedServer();
  FramedServer(const FramedServer&) = delete;
  FramedServer& operator=(const FramedServer&) = delete;

  // Binds, listens and starts the threads. Busy when the address is in use,
  // InvalidArgument on bad options, an unresolvable host, or a non-loopback
  // address without a shared secret; IOError on other socket failures.
  // REQUIRES: called at most once.
  Status Start();

  // Stops accepting, closes every connection, waits for calls in progress
  // and the close hooks to return, and joins every thread. REQUIRES: not
  // called from inside a call or hook run by this server.
  void Stop();

  // The bound port (the ephemeral one when options.port was 0); 0 before Start.
  uint16_t port() const;
  const ServerOptions& options() const;
  ServerStats stats() const;

  // Opaque; public only so that helpers in framed_server.cpp can name it.
  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deuteron::server
