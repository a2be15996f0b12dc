// Conversions between the DataComponent types (protocol/data_component.h)
// and the Thrift-generated ones (deuteron_types.h), in both directions, plus
// the validation of what arrives from the wire.
//
// Naming: ToWire* builds a Thrift value from ours (the sending side);
// FromWire* decodes a Thrift value into ours and checks it (the receiving
// side).
//  - Encoders of requests reject, with InvalidArgument, an unknown
//    RecordOpKind (as the receiver would) and an LSN or ESL above INT64_MAX
//    (the wire's i64).
//  - Decoders of requests (server side) reject, with InvalidArgument, what
//    the C++ types cannot hold: an unknown RecordOpKind, a negative LSN,
//    ESL, RSSP or limit.
//  - Decoders of replies (client side) reject an unknown DcState with
//    Internal (a peer we do not understand).
// Enum fields are read through their bytes: the generated code may hold a
// value outside the enumeration (see RawEnum in convert.cpp).
//
// Borrowing: FromWireApply and FromWireKeys return Slices into the Thrift
// request; the request must outlive them.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/slice.h"
#include "common/status.h"
#include "deuteron_types.h"
#include "protocol/data_component.h"

namespace deuteron::protocol {

// ---- Requests ----

// REQUIRES: out != nullptr. InvalidArgument on an unknown kind, or when an
// LSN or `esl` does not fit in an i64.
Status ToWireApply(std::span<const ::deuteron::RecordOp> ops, uint64_t esl, ApplyRequest* out);
// InvalidArgument on an unknown kind or a negative LSN or ESL.
// REQUIRES: ops != nullptr, esl != nullptr; `request` outlives *ops.
Status FromWireApply(const ApplyRequest& request, std::vector<::deuteron::RecordOp>* ops,
                     uint64_t* esl);

// Slices borrowed from `keys`.
std::vector<Slice> FromWireKeys(const std::vector<std::string>& keys);

// A limit above INT32_MAX is sent as INT32_MAX (the DC caps it lower anyway).
ScanRequest ToWireScan(const ::deuteron::ScanRequest& request);
// InvalidArgument on a negative limit.
Result<::deuteron::ScanRequest> FromWireScan(const ScanRequest& request);

// A read fence: incarnation always set, instance when nonzero.
// InvalidArgument when a value is above INT64_MAX.
Result<ReadFence> ToWireFence(const ::deuteron::ReadFence& fence);
// nullopt when the fence carries no incarnation (an unfenced read);
// InvalidArgument on a negative value.
Result<std::optional<::deuteron::ReadFence>> FromWireFence(const ReadFence& fence);

// An LSN-valued scalar argument (setEsl, proposeRssp, restartTo), or an
// incarnation (`what` names it). InvalidArgument when above INT64_MAX.
Result<int64_t> ToWireLsn(uint64_t lsn, const char* what);
// InvalidArgument when negative.
Result<uint64_t> FromWireLsn(int64_t lsn, const char* what);

// ---- Replies ----

ApplyResult ToWire(const ::deuteron::ApplyResult& r);
::deuteron::ApplyResult FromWire(const ApplyResult& r);

ReadResult ToWire(::deuteron::ReadResult&& r);  // takes the value
::deuteron::ReadResult FromWire(ReadResult&& r);

ScanResult ToWire(const ::deuteron::ScanResult& r);
::deuteron::ScanResult FromWire(ScanResult&& r);

DcReady ToWire(const ::deuteron::DcReady& r);
::deuteron::DcReady FromWire(const DcReady& r);

DcHealth ToWire(const ::deuteron::DcHealth& r);
// Internal on a DcState this build does not know.
Result<::deuteron::DcHealth> FromWire(const DcHealth& r);

DcStats ToWire(const ::deuteron::DcStats& r);
::deuteron::DcStats FromWire(const DcStats& r);

}  // namespace deuteron::protocol
