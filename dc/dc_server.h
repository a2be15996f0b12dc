// DcServer: serves a DataComponent over TCP with the DataComponentService
// protocol (protocol/deuteron.thrift), framed binary Thrift as written down
// in protocol/protocol.md; protocol::RemoteDataComponent is its client.
//
// Shape: Boost.Asio owns the sockets. Each of io_threads runs its own event
// loop; a connection is placed on one loop at accept (round robin) and its
// reads, writes and idle timer stay there (on its own strand), so a
// connection's events never cross threads. The calls that may wait a long
// time (proposeRssp waits for a flush of every page; restartTo recovers the
// store) go to worker_threads, which decode, call the DataComponent and
// encode, so such a call holds one worker, never a loop or another
// connection. Every other call (apply, get, multiGet, scan, setEsl, stats,
// health) is bounded by its request's limits and never waits on another
// call, and runs on the connection's loop: that saves two thread hand-offs,
// each a ~40 us wake of a halted vCPU on small machines
// (../shared/LIMITS.md), about a third of a 256-key call. Such a call that
// meets evicted pages holds its loop for those disk reads.
//
// Per connection: frames are read as they arrive (several may come in one
// read: pipelining) and queued; requests run one at a time in arrival order
// and replies go out in that order. Reading pauses while too much is queued
// or unsent (backpressure). When the peer closes (end of stream, a
// half-close included, or a reset), the connection closes at once and the
// requests queued on it are dropped unanswered: only a call already running
// finishes, its reply discarded. So nothing a crashed TC left queued runs
// after it is gone (the incarnation fence, protocol/protocol.md, covers what
// was already running). A frame over max_frame_size, a zero-length
// frame, or a connection idle past idle_timeout closes that connection only.
// A well-framed request whose payload does not decode (bad bytes, a string
// or container over its limit, an unknown method) gets an error reply and
// the connection stays usable. Bad input never ends the process.
//
// Thread safety: Start, Stop and the accessors may be called from any
// thread; Stop is idempotent and is called by the destructor.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "protocol/data_component.h"

namespace deuteron::dc {

struct DcServerOptions {
  std::string host = "127.0.0.1";  // an address (or a name that resolves)
  uint16_t port = 0;               // 0: an ephemeral port; see DcServer::port()
  int io_threads = 2;              // REQUIRES: >= 1
  int worker_threads = 4;          // REQUIRES: >= 1
  uint32_t max_frame_size = 64u << 20;  // payload bytes; REQUIRES: >= 64
  int32_t string_limit = 16 << 20;      // most bytes in one Thrift string
  int32_t container_limit = 1 << 20;    // most elements in one Thrift list
  size_t max_connections = 256;         // further connections are closed at once
  // A connection with no bytes read and no reply written for this long is
  // closed, unless a DataComponent call for it is in progress. Zero: never.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
};

class DcServer {
 public:
  // REQUIRES: dc outlives the server (until Stop returns).
  DcServer(DataComponent* dc, DcServerOptions options);
  ~DcServer();
  DcServer(const DcServer&) = delete;
  DcServer& operator=(const DcServer&) = delete;

  // Binds, listens and starts the threads. Busy when the address is in use,
  // InvalidArgument on bad options or an unresolvable host, IOError on other
  // socket failures. REQUIRES: called at most once.
  Status Start();

  // Stops accepting, closes every connection, waits for DataComponent calls
  // in progress to return, and joins every thread. REQUIRES: not called
  // from inside a DataComponent call made by this server.
  void Stop();

  // The bound port (the ephemeral one when options.port was 0); 0 before Start.
  uint16_t port() const;

  // Connections open now.
  size_t connections() const;
  // Connections accepted and closed at once for being over max_connections.
  uint64_t refused_connections() const;

  // Opaque; public only so that helpers in dc_server.cpp can name it.
  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deuteron::dc
