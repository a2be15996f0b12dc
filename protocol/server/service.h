// Service: what a FramedServer (protocol/server/framed_server.h) serves. The
// layer owns sockets, framing, limits, memory accounting, deadlines,
// admission and the shared secret; a Service supplies the Thrift processor
// that turns one decoded call into one reply, says where each method runs,
// and hears when connections open and close. The DC server
// (dc/dc_server.h) is one; the TC server is to be another.
//
// The contract, for an implementer:
//  - processor() is the generated `<Service>Processor` over the handler. It
//    is called once, at Start. Handlers report errors by throwing the
//    service's typed exception (DeuteronError): the processor encodes it as
//    the call's typed error reply. Anything else thrown becomes a
//    TApplicationException INTERNAL_ERROR reply; the connection survives.
//  - The Thrift service must declare, as its last method,
//      void authenticate(1: binary token) throws (1: DeuteronError error)
//    The layer answers it itself (protocol/protocol.md, "Authentication");
//    the handler's authenticate is never called and may do nothing.
//  - RunsInline(method): true only for calls whose work is bounded by their
//    request's own limits and that never wait for another call; they run on
//    the connection's io loop (saves two thread hand-offs). Every other
//    call, and anything unknown, runs on a worker thread.
//  - IsKnownMethod(method): a known method whose request breaks a string or
//    list limit gets a typed TOO_LARGE reply; an unknown one gets a
//    TApplicationException.
//  - A handler building a large reply charges its size as it grows through
//    CallContext::Current()->ChargeReply and stops with TooLarge when
//    refused (that bounds the memory a reply can take before the frame
//    limit is checked on the encoded bytes).
//  - OnConnectionOpen runs on the connection's io loop before its first
//    call (after authentication when a secret is required) and must not
//    block. OnConnectionClose runs on a worker thread once the connection is
//    closed and no call for it runs or will run; it may block briefly (a TC
//    aborts the connection's open transactions there). Both are called
//    exactly once per connection that was opened.
//
// Thread safety: processor(), RunsInline and IsKnownMethod are called from
// any thread, concurrently; the hooks are called concurrently for different
// connections. A CallContext is used only by the thread running its call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace apache::thrift {
class TProcessor;
}

namespace deuteron::server {

class MemoryGauge;

// The connection a call or hook belongs to.
struct ConnectionInfo {
  uint64_t id = 0;   // unique within one server's lifetime, never 0
  std::string peer;  // "address:port" of the client
};

// The call being served on this thread: which connection it came on, and
// the budget its reply is built against.
class CallContext {
 public:
  // `gauge` may be null (nothing accounted server-wide).
  CallContext(const ConnectionInfo* connection, size_t reply_limit, MemoryGauge* gauge);
  ~CallContext();
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;

  // The call in progress on this thread; nullptr outside a served call (a
  // handler called directly, in a test).
  static CallContext* Current();

  const ConnectionInfo& connection() const { return *connection_; }

  // Adds `bytes` to the estimate of this call's reply. TooLarge once the
  // estimate passes reply_limit() (and on every later charge): the handler
  // stops building and returns the error. The bytes count against the
  // server's request memory until the call ends.
  Status ChargeReply(size_t bytes);
  size_t reply_charged() const { return charged_; }
  size_t reply_limit() const { return reply_limit_; }

 private:
  const ConnectionInfo* const connection_;
  const size_t reply_limit_;
  MemoryGauge* const gauge_;
  size_t charged_ = 0;
  bool refused_ = false;
  CallContext* const previous_;
};

// Charges the reply of the call in progress on this thread, if any; OK
// outside a served call.
Status ChargeReply(size_t bytes);

class Service {
 public:
  virtual ~Service() = default;

  virtual std::shared_ptr<apache::thrift::TProcessor> processor() = 0;
  virtual bool RunsInline(std::string_view method) const = 0;
  virtual bool IsKnownMethod(std::string_view method) const = 0;

  virtual void OnConnectionOpen(const ConnectionInfo& /*connection*/) {}
  virtual void OnConnectionClose(const ConnectionInfo& /*connection*/) {}
};

}  // namespace deuteron::server
