// RemoteDataComponent: the remote binding of DataComponent. Each call is one
// Thrift binary message in one frame (4-byte big-endian length + payload)
// over TCP to a DC server (dc/dc_server.h); protocol/protocol.md has the wire
// format, limits and error mapping.
//
// Errors: a DC's own failure crosses the wire as DeuteronError and comes back
// with its code. Failures of the hop itself are typed too:
//  - server unreachable, connection refused, closed or reset: Unavailable;
//  - a send or receive past its timeout: TimedOut;
//  - a request frame over max_frame_size: TooLarge (nothing is sent);
//  - the server refused the shared secret (or wanted one): Unauthenticated;
//  - a reply the client cannot decode, or over max_frame_size: IOError;
//  - the server rejected the request's bytes (TApplicationException):
//    InvalidArgument (protocol error), NotSupported (unknown method),
//    Internal (anything else).
// No exception escapes any method.
//
// Connections: a pool of at most max_connections TCP connections, each used
// by one call at a time (calls beyond that wait for a free one). A
// connection that failed at the transport level (or timed out, leaving a
// reply in flight) is closed and dropped; the next call opens a fresh one,
// so a client recovers by itself when its server comes back.
//
// Thread safety: every method is thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/data_component.h"

namespace deuteron::protocol {

class ReadFence;  // the wire form (deuteron_types.h), not ::deuteron::ReadFence

struct RemoteOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // REQUIRES: nonzero
  int connect_timeout_ms = 2000;
  int send_timeout_ms = 10000;
  // RSSP proposals wait for LSS flushes: keep this well above a flush.
  int recv_timeout_ms = 60000;
  size_t max_connections = 8;            // REQUIRES: >= 1
  uint32_t max_frame_size = 64u << 20;   // payload bytes, both directions
  // The server's shared secret; empty: none. When set, every connection
  // presents it with `authenticate` right after connecting
  // (protocol/protocol.md, "Authentication"); a refusal is Unauthenticated.
  std::string secret;
};

class RemoteDataComponent final : public DataComponent {
 public:
  // Checks the options and opens one connection, so that an unreachable
  // server is reported here (Unavailable) rather than on the first call.
  static Result<std::unique_ptr<RemoteDataComponent>> Connect(RemoteOptions options);

  ~RemoteDataComponent() override;
  RemoteDataComponent(const RemoteDataComponent&) = delete;
  RemoteDataComponent& operator=(const RemoteDataComponent&) = delete;

  Result<::deuteron::ApplyResult> Apply(std::span<const ::deuteron::RecordOp> ops, uint64_t esl,
                                        uint64_t incarnation) override;
  Result<::deuteron::ReadResult> Get(Slice key) override;
  Result<std::vector<::deuteron::ReadResult>> MultiGet(std::span<const Slice> keys) override;
  Result<::deuteron::ScanResult> Scan(const ::deuteron::ScanRequest& request) override;
  Result<::deuteron::ReadResult> GetFenced(Slice key, const ::deuteron::ReadFence& fence) override;
  Result<std::vector<::deuteron::ReadResult>> MultiGetFenced(
      std::span<const Slice> keys, const ::deuteron::ReadFence& fence) override;
  Result<::deuteron::ScanResult> ScanFenced(const ::deuteron::ScanRequest& request,
                                            const ::deuteron::ReadFence& fence) override;
  Status SetEsl(uint64_t esl, uint64_t incarnation) override;
  Status ProposeRssp(uint64_t rssp, uint64_t incarnation) override;
  Result<::deuteron::DcReady> RestartTo(uint64_t stable_end) override;
  Result<::deuteron::DcReady> RestartToStore(uint64_t stable_end,
                                             const ::deuteron::StoreId& store_id) override;
  Result<::deuteron::DcStats> GetStats() override;
  Result<::deuteron::DcHealth> Health() override;

  // Connections open now (idle or in use); for tests and stats.
  size_t open_connections() const;

 private:
  class Connection;

  explicit RemoteDataComponent(RemoteOptions options);

  // Takes an idle connection, or opens one when fewer than max_connections
  // are open, or waits for one to be released.
  Result<std::unique_ptr<Connection>> Acquire();
  // Presents options_.secret on a fresh connection. Throws nothing.
  Status Authenticate(Connection& conn);
  // `broken`: the connection is closed and forgotten instead of kept.
  void Release(std::unique_ptr<Connection> conn, bool broken);

  // Runs one call: `send` writes the request through the connection's
  // client, `recv` reads the reply. Maps every exception to a Status.
  template <typename Send, typename Recv>
  Status Call(const char* method, Send&& send, Recv&& recv);

  // The reads; `fence` without an incarnation set: unfenced.
  Result<::deuteron::ReadResult> DoGet(Slice key, const ReadFence& fence);
  Result<std::vector<::deuteron::ReadResult>> DoMultiGet(std::span<const Slice> keys,
                                                         const ReadFence& fence);
  Result<::deuteron::ScanResult> DoScan(const ::deuteron::ScanRequest& request,
                                        const ReadFence& fence);

  const RemoteOptions options_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  std::vector<std::unique_ptr<Connection>> idle_;  // GUARDED_BY(mu_)
  size_t open_ = 0;                                // GUARDED_BY(mu_): idle + in use
};

}  // namespace deuteron::protocol
