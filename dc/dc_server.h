// DcServer: serves a DataComponent over TCP with the DataComponentService
// protocol (protocol/deuteron.thrift), framed binary Thrift as written down
// in protocol/protocol.md; protocol::RemoteDataComponent is its client.
//
// A thin Service over the server layer (protocol/server/framed_server.h),
// which owns the sockets, framing, limits, request memory, backpressure,
// admission, deadlines and the shared secret; see there for the shape and
// the per-connection rules. This file adds the DC's handler and where each
// call runs: proposeRssp (waits for a flush of every page) and restartTo
// (recovers the store) go to the worker threads; every other call (apply,
// get, multiGet, scan, setEsl, stats, health) is bounded by its request's
// limits and never waits on another call, and runs on the connection's io
// loop: that saves two thread hand-offs, each a ~40 us wake of a halted
// vCPU on small machines (../shared/LIMITS.md), about a third of a 256-key
// call. Such a call that meets evicted pages holds its loop for those disk
// reads.
//
// multiGet reads its keys in slices and charges each slice's values to the
// call's reply budget (server::CallContext), so a reply that would pass the
// frame limit fails TOO_LARGE after at most one slice past the limit, never
// after materializing the whole answer.
//
// Thread safety: Start, Stop and the accessors may be called from any
// thread; Stop is idempotent and is called by the destructor.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "protocol/data_component.h"
#include "protocol/server/framed_server.h"

namespace deuteron::dc {

// Every limit, default and deadline of the server (protocol/protocol.md,
// "Limits"), and the one DC limit the server must apply itself.
struct DcServerOptions : server::ServerOptions {
  // The served DC's DcOptions::max_multiget_keys (same default): multiGet
  // reads in slices, so the server checks the call's key count itself.
  size_t max_multiget_keys = 65536;
};

class DcServer {
 public:
  // Keys read from the DataComponent at a time by one multiGet.
  static constexpr size_t kMultiGetSlice = 64;

  // REQUIRES: dc outlives the server (until Stop returns).
  DcServer(DataComponent* dc, DcServerOptions options);
  ~DcServer();
  DcServer(const DcServer&) = delete;
  DcServer& operator=(const DcServer&) = delete;

  // See server::FramedServer::Start. REQUIRES: called at most once.
  Status Start();

  // Stops accepting, closes every connection, waits for DataComponent calls
  // in progress to return, and joins every thread. REQUIRES: not called
  // from inside a DataComponent call made by this server.
  void Stop();

  // The bound port (the ephemeral one when options.port was 0); 0 before Start.
  uint16_t port() const;

  // Connections open now.
  size_t connections() const;
  // Connections closed at accept: over max_connections, none evictable.
  uint64_t refused_connections() const;
  server::ServerStats stats() const;

 private:
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<server::FramedServer> server_;
};

}  // namespace deuteron::dc
