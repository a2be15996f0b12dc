// FramedServer::Impl (protocol/server/framed_server.h): the server's shared
// state, declared here so that the connections (internal/connection.h) can
// reach it. Internal to protocol/server/; include nothing from here outside
// it. Thread safety: as framed_server.h says, member by member below.
#pragma once

#include "protocol/server/framed_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <poll.h>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <thrift/TApplicationException.h>
#include <thrift/TConfiguration.h>
#include <thrift/TProcessor.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/protocol/TProtocolException.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TTransportException.h>

#include "common/logging.h"
#include "protocol/server/memory_gauge.h"
#include "protocol/server/wire.h"

namespace deuteron::server {
namespace internal {

class Connection;

namespace asio = boost::asio;
namespace thrift = ::apache::thrift;
using asio::ip::tcp;
using thrift::TApplicationException;
using thrift::protocol::TBinaryProtocol;
using thrift::protocol::TProtocolException;
using thrift::transport::TMemoryBuffer;
using thrift::transport::TTransportException;

using Strand = asio::strand<asio::io_context::executor_type>;
using Socket = tcp::socket::rebind_executor<Strand>::other;
using Timer = asio::steady_timer::rebind_executor<Strand>::other;
using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 64 * 1024;
// Most requests queued on one connection before it stops reading.
constexpr size_t kMaxQueuedFrames = 256;
// Unsent reply bytes under which a connection still starts calls and reads:
// above it, the peer must read first (so it holds at most one reply, at most
// a frame, beyond this).
constexpr size_t kReplySlack = 256 * 1024;

inline int64_t NowNs() { return Clock::now().time_since_epoch().count(); }

// This thread's reply buffer, empty and reused from call to call: a fresh
// one grew by doubling, a handful of large allocations per 256-key reply.
// One that served a reply over kKeptReplyBuffer is dropped afterwards.
constexpr size_t kKeptReplyBuffer = 1 << 20;
inline std::shared_ptr<TMemoryBuffer>& ReplyBuffer() {
  thread_local std::shared_ptr<TMemoryBuffer> buffer;
  if (!buffer) buffer = std::make_shared<TMemoryBuffer>(64 * 1024);
  buffer->resetBuffer();
  return buffer;
}

// This loop thread's read buffer: connections read into it only when bytes
// are ready (a reactor-style read), so an idle connection holds none.
inline char* ReadBuffer() {
  thread_local std::array<char, kReadChunk> buffer;
  return buffer.data();
}

inline std::vector<std::unique_ptr<asio::io_context>> MakeLoops(int n) {
  std::vector<std::unique_ptr<asio::io_context>> loops;
  for (int i = 0; i < std::max(n, 1); ++i) loops.push_back(std::make_unique<asio::io_context>(1));
  return loops;
}


}  // namespace internal

class FramedServer::Impl {
  // The layer's names (internal/), for the declarations below.
  using Connection = internal::Connection;
  using Socket = internal::Socket;
  using Strand = internal::Strand;
  using Timer = internal::Timer;
  using tcp = internal::tcp;

 public:
  Impl(Service* service, ServerOptions options);
  ~Impl() { Stop(); }

  Status Start();
  void Stop();

  uint16_t port() const { return port_.load(); }
  ServerStats stats() const;

  // Used by connections.
  const ServerOptions& options() const { return options_; }
  Service* service() const { return service_; }
  MemoryGauge& gauge() { return gauge_; }
  boost::asio::thread_pool& workers() { return *workers_; }
  // Decodes one request payload, runs it, and returns the reply frame
  // (length word included); nullopt when not even an error reply could be
  // built (close the connection). Never throws.
  std::optional<std::string> Process(const ConnectionInfo& conn, std::string& payload);
  // A connection closed: no longer open (nor counted for admission); its
  // close hook is still to run.
  void MarkClosed(uint64_t id);
  // Its close hook ran: the server forgets it.
  void Unregister(uint64_t id);

  std::atomic<uint64_t> idle_closed{0};
  std::atomic<uint64_t> deadline_closed{0};
  std::atomic<uint64_t> auth_failures{0};

 private:
  void DoAccept();
  void OnAccept(const boost::system::error_code& ec, Socket socket);
  // Under mu_: the open connection to close for a new one, or null.
  std::shared_ptr<Connection> PickEvictableLocked();

  Service* const service_;
  const ServerOptions options_;
  MemoryGauge gauge_;
  std::shared_ptr<apache::thrift::TProcessor> processor_;
  std::shared_ptr<apache::thrift::TConfiguration> config_;

  // One event loop per io thread, each run by its thread alone.
  std::vector<std::unique_ptr<boost::asio::io_context>> ios_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  size_t next_io_ = 0;      // used on accept_strand_ only
  Strand accept_strand_;    // on ios_[0]
  tcp::acceptor acceptor_;  // used on accept_strand_ only
  Timer accept_retry_;      // after a failed accept (out of descriptors)
  std::unique_ptr<boost::asio::thread_pool> workers_;
  std::vector<std::thread> io_threads_;

  std::mutex lifecycle_mu_;  // serializes Start and Stop
  bool started_ = false;     // GUARDED_BY(lifecycle_mu_)
  bool stopped_ = false;     // GUARDED_BY(lifecycle_mu_)

  mutable std::mutex mu_;
  std::condition_variable conns_changed_;
  bool stopping_ = false;                                          // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;                                           // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> conns_;  // GUARDED_BY(mu_): open
  size_t closing_ = 0;  // GUARDED_BY(mu_): closed, close hook not yet run

  std::atomic<uint16_t> port_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> evicted_{0};
};

}  // namespace deuteron::server
