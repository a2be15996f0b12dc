#include "tc/crash/faults.h"

#include <algorithm>

namespace deuteron::crash {
namespace {

constexpr std::array<std::string_view, kFaultKinds> kNames = {
    "kill", "killpoint", "powerloss", "torn", "bitflip", "enospc", "eio", "rpc", "stall"};

}  // namespace

std::string_view FaultName(FaultKind kind) { return kNames[static_cast<size_t>(kind)]; }

bool NeedsHooks(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKill:
    case FaultKind::kBitflip:
    case FaultKind::kRpc:
      return false;
    default:
      return true;
  }
}

Result<std::vector<FaultKind>> ParseFaults(std::string_view list) {
  std::vector<FaultKind> kinds;
  size_t pos = 0;
  while (true) {
    const size_t comma = list.find(',', pos);
    const std::string_view name =
        list.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const auto it = std::find(kNames.begin(), kNames.end(), name);
    if (it == kNames.end()) {
      return Status::InvalidArgument("unknown fault \"" + std::string(name) +
                                     "\" (kill, killpoint, powerloss, torn, bitflip, enospc, eio, rpc, stall)");
    }
    const auto kind = static_cast<FaultKind>(it - kNames.begin());
    if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) {
      return Status::InvalidArgument("fault \"" + std::string(name) + "\" given twice");
    }
    kinds.push_back(kind);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return kinds;
}

}  // namespace deuteron::crash
