#include "tc/crash/crash_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/json.h"

namespace deuteron::crash {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p * static_cast<double>(values.size()));
  const size_t i = rank < 1 ? 0 : std::min(values.size() - 1, static_cast<size_t>(rank) - 1);
  return values[i];
}

std::string CrashReport::ToJson(const std::vector<FaultKind>& enabled) const {
  char ms[64];
  std::string j = "{\"seed\":" + std::to_string(seed) + ",\"cycles\":" + std::to_string(cycles) +
                  ",\"faults\":{";
  for (size_t i = 0; i < enabled.size(); ++i) {
    if (i > 0) j += ",";
    j += JsonString(std::string(FaultName(enabled[i]))) + ":" +
         std::to_string(faults[static_cast<size_t>(enabled[i])]);
  }
  j += "},\"kill_points_hit\":" + std::to_string(kill_points_hit);
  j += ",\"kill_point_names\":{";
  bool first = true;
  for (const auto& [name, n] : kill_point_names) {
    if (!first) j += ",";
    first = false;
    j += JsonString(name) + ":" + std::to_string(n);
  }
  j += "}";
  j += ",\"acknowledged\":" + std::to_string(acknowledged);
  j += ",\"verified\":" + std::to_string(verified);
  j += ",\"unknown\":" + std::to_string(unknown);
  j += ",\"keys_checked\":" + std::to_string(keys_checked);
  j += ",\"history_ops_checked\":" + std::to_string(history_ops_checked);
  std::snprintf(ms, sizeof(ms), ",\"recovery_ms_p50\":%.1f", Percentile(recovery_ms, 0.50));
  j += ms;
  std::snprintf(ms, sizeof(ms), ",\"recovery_ms_p99\":%.1f", Percentile(recovery_ms, 0.99));
  j += ms;
  j += ",\"recoveries\":" + std::to_string(recovery_ms.size());
  j += ",\"bitflips_detected\":" + std::to_string(bitflips_detected);
  j += ",\"bitflips_harmless\":" + std::to_string(bitflips_harmless);
  j += ",\"bitflips_found_by_check\":" + std::to_string(bitflips_found_by_check);
  if (rpc.frames > 0) {
    j += ",\"rpc\":{\"frames\":" + std::to_string(rpc.frames) + ",\"delayed\":" + std::to_string(rpc.delayed) +
         ",\"dropped\":" + std::to_string(rpc.dropped) + ",\"reset\":" + std::to_string(rpc.reset) +
         ",\"duplicated\":" + std::to_string(rpc.duplicated) + "}";
  }
  j += ",\"io_faults_survived\":" + std::to_string(io_faults_survived);
  j += ",\"tc_fail_stops\":" + std::to_string(tc_fail_stops);
  if (crashed_store_checks > 0) {
    j += ",\"crashed_store_checks\":" + std::to_string(crashed_store_checks);
    j += ",\"crashed_store_check_failures\":" + std::to_string(crashed_store_check_failures);
  }
  j += ",\"store_checks\":" + std::to_string(store_checks);
  j += ",\"lsn_probes\":" + std::to_string(lsn_probes);
  if (range_txns > 0) j += ",\"range_txns\":" + std::to_string(range_txns);
  if (!break_contract.empty()) j += ",\"break\":" + JsonString(break_contract);
  j += ",\"first_violation_cycle\":" + std::to_string(first_violation_cycle);
  j += ",\"violations\":[";
  for (size_t i = 0; i < violations.size(); ++i) {
    if (i > 0) j += ",";
    j += JsonString(violations[i]);
  }
  return j + "]}";
}

}  // namespace deuteron::crash
