#include "exec/launch/comm_plan.h"

#include <algorithm>
#include <set>

namespace alpasim::exec::launch {

std::vector<std::int32_t> CommPlan::groups_of(std::int32_t rank) const {
  std::vector<std::int32_t> out;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& m = groups[g].members;
    if (std::find(m.begin(), m.end(), rank) != m.end()) out.push_back(static_cast<std::int32_t>(g));
  }
  return out;
}

std::int32_t CommPlan::rank_in(std::int32_t group, std::int32_t rank) const {
  const auto& m = groups[static_cast<std::size_t>(group)].members;
  auto it = std::find(m.begin(), m.end(), rank);
  return it == m.end() ? -1 : static_cast<std::int32_t>(it - m.begin());
}

core::Result<CommPlan> comm_plan(const Program& program) {
  const auto n = static_cast<std::int32_t>(program.devices.size());
  std::set<std::vector<std::int32_t>> collectives;
  std::set<std::pair<std::int32_t, std::int32_t>> channels;
  for (std::size_t d = 0; d < program.code.size(); ++d) {
    const auto dev = static_cast<std::int32_t>(d);
    for (std::size_t i = 0; i < program.code[d].size(); ++i) {
      const Instruction& in = program.code[d][i];
      const std::string where = "device index " + std::to_string(d) + " instruction #" + std::to_string(i) + " (" +
                                std::string(instr_kind_name(in.kind)) + ")";
      switch (in.kind) {
        case InstrKind::kSend:
        case InstrKind::kRecv:
          if (in.peer < 0 || in.peer >= n || in.peer == dev) {
            return core::invalid_argument(where + ": expected a peer in [0, " + std::to_string(n) +
                                          ") other than itself, got " + std::to_string(in.peer));
          }
          channels.insert(in.kind == InstrKind::kSend ? std::make_pair(dev, in.peer) : std::make_pair(in.peer, dev));
          break;
        case InstrKind::kAllReduce:
        case InstrKind::kAllGather:
        case InstrKind::kReduceScatter:
        case InstrKind::kAllToAll: {
          std::set<std::int32_t> seen;
          for (std::int32_t m : in.group) {
            if (m < 0 || m >= n || !seen.insert(m).second) {
              return core::invalid_argument(where + ": expected distinct group members in [0, " + std::to_string(n) +
                                            "), got " + std::to_string(m));
            }
          }
          if (!seen.count(dev)) {
            return core::invalid_argument(where + ": expected a group containing the device, got one without it");
          }
          collectives.insert(in.group);
          break;
        }
        default: break;
      }
    }
  }
  CommPlan plan;
  CommGroup world{CommKind::kWorld, {}};
  for (std::int32_t d = 0; d < n; ++d) world.members.push_back(d);
  plan.groups.push_back(world);
  for (const auto& g : collectives) {
    plan.collective[g] = static_cast<std::int32_t>(plan.groups.size());
    plan.groups.push_back({CommKind::kCollective, g});
  }
  for (const auto& [from, to] : channels) {
    plan.channel[{from, to}] = static_cast<std::int32_t>(plan.groups.size());
    plan.groups.push_back({CommKind::kChannel, {from, to}});
  }
  return plan;
}

}  // namespace alpasim::exec::launch
