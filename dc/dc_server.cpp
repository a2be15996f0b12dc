#include "dc/dc_server.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <thrift/TProcessor.h>

#include "DataComponentService.h"
#include "protocol/convert.h"
#include "protocol/errors.h"
#include "protocol/server/service.h"

namespace deuteron::dc {
namespace {

namespace proto = ::deuteron::protocol;

// Encoded bytes of one ReadResult beyond its value: field headers, the
// found flag, the LSN, the value's length word, the struct's stop byte.
constexpr size_t kReadResultOverhead = 24;

// The DataComponentServiceIf implementation: converts, calls the
// DataComponent, converts back. DataComponent errors leave as DeuteronError,
// which the generated processor turns into the call's typed error reply.
// Thread-safe as the DataComponent is.
class Handler final : public proto::DataComponentServiceIf {
 public:
  Handler(DataComponent* dc, size_t max_multiget_keys)
      : dc_(dc), max_multiget_keys_(max_multiget_keys) {}

  void apply(proto::ApplyResult& out, const proto::ApplyRequest& request) override {
    std::vector<RecordOp> ops;
    uint64_t esl = 0;
    Check(proto::FromWireApply(request, &ops, &esl));
    const uint64_t incarnation = Value(proto::FromWireLsn(request.incarnation, "incarnation"));
    out = proto::ToWire(Value(dc_->Apply(ops, esl, incarnation)));
  }

  // A fence without an incarnation (an older client, a tool) reads unfenced.
  void get(proto::ReadResult& out, const std::string& key, const proto::ReadFence& fence) override {
    const std::optional<ReadFence> f = Value(proto::FromWireFence(fence));
    out = proto::ToWire(Value(f ? dc_->GetFenced(Slice(key), *f) : dc_->Get(Slice(key))));
  }

  // In slices of kMultiGetSlice keys, each charged to the reply budget as
  // it is converted: a reply headed past the frame limit stops there.
  void multiGet(std::vector<proto::ReadResult>& out, const std::vector<std::string>& keys,
                const proto::ReadFence& fence) override {
    const std::optional<ReadFence> f = Value(proto::FromWireFence(fence));
    auto read = [&](std::span<const Slice> ks) { return f ? dc_->MultiGetFenced(ks, *f) : dc_->MultiGet(ks); };
    if (keys.size() > max_multiget_keys_) {
      Check(Status::TooLarge(fmt::format("multiGet of {} keys over the maximum of {}", keys.size(),
                                         max_multiget_keys_)));
    }
    const std::vector<Slice> slices = proto::FromWireKeys(keys);
    out.clear();
    Check(server::ChargeReply(keys.size() * kReadResultOverhead));
    out.reserve(keys.size());
    const std::span<const Slice> all(slices);
    if (all.empty()) {
      Value(read(all));  // the DC's own checks for an empty call
      return;
    }
    for (size_t at = 0; at < all.size(); at += DcServer::kMultiGetSlice) {
      const size_t n = std::min(DcServer::kMultiGetSlice, all.size() - at);
      std::vector<ReadResult> results = Value(read(all.subspan(at, n)));
      size_t bytes = 0;
      for (const ReadResult& r : results) bytes += r.value.size();
      Check(server::ChargeReply(bytes));
      for (ReadResult& r : results) out.push_back(proto::ToWire(std::move(r)));
    }
  }

  void scan(proto::ScanResult& out, const proto::ScanRequest& request,
            const proto::ReadFence& fence) override {
    const ScanRequest r = Value(proto::FromWireScan(request));
    const std::optional<ReadFence> f = Value(proto::FromWireFence(fence));
    ScanResult result = Value(f ? dc_->ScanFenced(r, *f) : dc_->Scan(r));
    size_t bytes = 0;
    for (const ScanItem& item : result.items) {
      bytes += item.key.size() + item.value.size() + kReadResultOverhead;
    }
    Check(server::ChargeReply(bytes));
    out = proto::ToWire(std::move(result));
  }

  void setEsl(const int64_t esl, const int64_t incarnation) override {
    Check(dc_->SetEsl(Value(proto::FromWireLsn(esl, "ESL")),
                      Value(proto::FromWireLsn(incarnation, "incarnation"))));
  }

  void proposeRssp(const int64_t rssp, const int64_t incarnation) override {
    Check(dc_->ProposeRssp(Value(proto::FromWireLsn(rssp, "RSSP")),
                           Value(proto::FromWireLsn(incarnation, "incarnation"))));
  }

  void restartTo(proto::DcReady& out, const int64_t stable_end, const std::string& store_id) override {
    const uint64_t end = Value(proto::FromWireLsn(stable_end, "stable end"));
    if (store_id.empty()) {  // absent (an older TC): no check
      out = proto::ToWire(Value(dc_->RestartTo(end)));
      return;
    }
    const StoreId id = Value(StoreId::FromBytes(store_id));
    out = proto::ToWire(Value(dc_->RestartToStore(end, id)));
  }

  void stats(proto::DcStats& out) override { out = proto::ToWire(Value(dc_->GetStats())); }

  void health(proto::DcHealth& out) override { out = proto::ToWire(Value(dc_->Health())); }

  // Answered by the server layer; never reaches the handler.
  void authenticate(const std::string& /*token*/) override {
    Check(Status::Internal("authenticate reached the DC handler"));
  }

 private:
  static void Check(const Status& s) {
    if (!s.ok()) throw proto::ToDeuteronError(s);
  }
  template <typename T>
  static T Value(Result<T> r) {
    if (!r.ok()) throw proto::ToDeuteronError(r.status());
    return std::move(r).value();
  }

  DataComponent* const dc_;
  const size_t max_multiget_keys_;
};

}  // namespace

class DcServer::Service final : public server::Service {
 public:
  Service(DataComponent* dc, size_t max_multiget_keys)
      : processor_(std::make_shared<proto::DataComponentServiceProcessor>(
            std::make_shared<Handler>(dc, max_multiget_keys))) {}

  std::shared_ptr<apache::thrift::TProcessor> processor() override { return processor_; }

  // Every call whose work is bounded by the request's own limits and that
  // never waits for another call (during a restart they answer Unavailable
  // at once).
  bool RunsInline(std::string_view method) const override {
    static constexpr std::string_view kInline[] = {"apply",  "get",   "multiGet", "scan",
                                                   "setEsl", "stats", "health"};
    return std::find(std::begin(kInline), std::end(kInline), method) != std::end(kInline);
  }

  // The methods of DataComponentService (keep in step with deuteron.thrift).
  bool IsKnownMethod(std::string_view method) const override {
    static constexpr std::string_view kMethods[] = {"apply",     "get",   "multiGet", "scan",
                                                    "setEsl",    "proposeRssp", "restartTo",
                                                    "stats",     "health", "authenticate"};
    return std::find(std::begin(kMethods), std::end(kMethods), method) != std::end(kMethods);
  }

 private:
  std::shared_ptr<apache::thrift::TProcessor> processor_;
};

DcServer::DcServer(DataComponent* dc, DcServerOptions options)
    : service_(std::make_unique<Service>(dc, options.max_multiget_keys)) {
  server::ServerOptions base = options;
  if (base.name == "server") base.name = "DC server";
  server_ = std::make_unique<server::FramedServer>(service_.get(), std::move(base));
}

DcServer::~DcServer() { server_->Stop(); }

Status DcServer::Start() { return server_->Start(); }
void DcServer::Stop() { server_->Stop(); }
uint16_t DcServer::port() const { return server_->port(); }
size_t DcServer::connections() const { return server_->stats().connections; }
uint64_t DcServer::refused_connections() const { return server_->stats().refused_connections; }
server::ServerStats DcServer::stats() const { return server_->stats(); }

}  // namespace deuteron::dc
