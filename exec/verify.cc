#include "exec/verify.h"

#include <algorithm>
#include <deque>
#include <set>
#include <utility>

namespace alpasim::exec {
namespace {

std::string where(const Program& p, std::size_t dev, std::size_t pc) {
  std::string s = "device " + std::to_string(p.devices[dev]) + " instruction #" + std::to_string(pc);
  if (pc < p.code[dev].size()) {
    const Instruction& in = p.code[dev][pc];
    s += " (" + std::string(instr_kind_name(in.kind));
    if (in.op != ir::kNoOp && in.stage >= 0) s += " " + p.graph_of_stage(in.stage).op(in.op).name;
    if (in.microbatch >= 0) s += " mb" + std::to_string(in.microbatch);
    s += ")";
  }
  return s;
}

}  // namespace

std::vector<std::int64_t> memory_high_water(const Program& program) {
  std::vector<std::int64_t> peak(program.code.size(), 0);
  for (std::size_t d = 0; d < program.code.size(); ++d) {
    std::int64_t now = 0;
    for (const Instruction& in : program.code[d]) {
      if (in.kind == InstrKind::kAllocate) {
        now += program.buffers[static_cast<std::size_t>(in.buffer)].bytes;
        peak[d] = std::max(peak[d], now);
      } else if (in.kind == InstrKind::kFree) {
        now -= program.buffers[static_cast<std::size_t>(in.buffer)].bytes;
      }
    }
  }
  return peak;
}

core::Result<ProgramStats> verify_program(const Program& p) {
  const std::size_t n = p.code.size();
  ProgramStats stats;
  stats.peak_bytes.assign(n, 0);
  stats.peak_breakdown.assign(n, {});
  stats.instructions.assign(n, {});
  stats.sent_bytes.assign(n, 0);
  std::vector<std::size_t> pc(n, 0);
  std::vector<std::int64_t> mem(n, 0);
  std::vector<std::map<std::string, std::int64_t>> by_role(n);
  // 0 never allocated, 1 live, 2 freed.
  std::vector<char> state(p.buffers.size(), 0);
  std::map<std::pair<std::int32_t, std::int32_t>, std::deque<std::pair<std::int64_t, std::int64_t>>> chan;
  struct Coll {
    InstrKind kind;
    std::vector<std::int32_t> group;
    std::set<std::int32_t> arrived;
  };
  std::map<std::int64_t, Coll> colls;
  std::vector<char> arrived_here(n, 0);  // the device registered at its current collective

  auto buffer_ok = [&](std::size_t d, std::size_t i, BufferId b) -> core::Status {
    if (b < 0 || static_cast<std::size_t>(b) >= p.buffers.size()) {
      return core::internal_error(where(p, d, i) + ": no buffer " + std::to_string(b));
    }
    if (static_cast<std::size_t>(p.buffers[static_cast<std::size_t>(b)].device) != d) {
      return core::internal_error(where(p, d, i) + ": buffer b" + std::to_string(b) +
                                  " belongs to another device");
    }
    if (state[static_cast<std::size_t>(b)] != 1) {
      return core::internal_error(where(p, d, i) + ": buffer b" + std::to_string(b) + " is not live");
    }
    return core::ok_status();
  };

  bool done = false;
  while (!done) {
    bool progress = false;
    done = true;
    for (std::size_t d = 0; d < n; ++d) {
      const auto& code = p.code[d];
      while (pc[d] < code.size()) {
        const std::size_t i = pc[d];
        const Instruction& in = code[i];
        const auto dev = static_cast<std::int32_t>(d);
        bool advance = true;
        switch (in.kind) {
          case InstrKind::kAllocate: {
            const auto b = static_cast<std::size_t>(in.buffer);
            if (b >= p.buffers.size() || state[b] != 0 || p.buffers[b].device != dev) {
              return core::internal_error(where(p, d, i) + ": bad ALLOCATE of b" + std::to_string(in.buffer));
            }
            state[b] = 1;
            mem[d] += p.buffers[b].bytes;
            by_role[d][std::string(buffer_role_name(p.buffers[b].role))] += p.buffers[b].bytes;
            if (mem[d] > stats.peak_bytes[d]) {
              stats.peak_bytes[d] = mem[d];
              stats.peak_breakdown[d] = by_role[d];
            }
            break;
          }
          case InstrKind::kFree: {
            ALPASIM_RETURN_IF_ERROR(buffer_ok(d, i, in.buffer));
            const auto b = static_cast<std::size_t>(in.buffer);
            state[b] = 2;
            mem[d] -= p.buffers[b].bytes;
            by_role[d][std::string(buffer_role_name(p.buffers[b].role))] -= p.buffers[b].bytes;
            break;
          }
          case InstrKind::kRun:
            ALPASIM_RETURN_IF_ERROR(buffer_ok(d, i, in.buffer));
            for (BufferId b : in.inputs) ALPASIM_RETURN_IF_ERROR(buffer_ok(d, i, b));
            break;
          case InstrKind::kSend: {
            ALPASIM_RETURN_IF_ERROR(buffer_ok(d, i, in.buffer));
            const Buffer& b = p.buffers[static_cast<std::size_t>(in.buffer)];
            if (in.offset_elements < 0 || in.offset_elements + in.count_elements > b.elements) {
              return core::internal_error(where(p, d, i) + ": range outside the buffer");
            }
            if (b.elements > 0 && b.element_bytes <= 0) {
              return core::internal_error(where(p, d, i) + ": buffer b" + std::to_string(in.buffer) +
                                          " has no element size");
            }
            chan[{dev, in.peer}].push_back({in.tag, in.count_elements});
            stats.sent_bytes[d] += in.count_elements * b.element_bytes;
            break;
          }
          case InstrKind::kRecv: {
            ALPASIM_RETURN_IF_ERROR(buffer_ok(d, i, in.buffer));
            auto& q = chan[{in.peer, dev}];
            if (q.empty()) {
              advance = false;
              break;
            }
            if (q.front().first != in.tag || q.front().second != in.count_elements) {
              return core::internal_error(
                  where(p, d, i) + ": receives tag " + std::to_string(in.tag) + " but the oldest send from device " +
                  std::to_string(p.devices[static_cast<std::size_t>(in.peer)]) + " carries tag " +
                  std::to_string(q.front().first) + " (point-to-point order differs)");
            }
            q.pop_front();
            break;
          }
          default: {  // collectives
            ALPASIM_RETURN_IF_ERROR(buffer_ok(d, i, in.buffer));
            for (BufferId b : in.inputs) ALPASIM_RETURN_IF_ERROR(buffer_ok(d, i, b));
            if (std::find(in.group.begin(), in.group.end(), dev) == in.group.end()) {
              return core::internal_error(where(p, d, i) + ": device not in the collective's group");
            }
            auto [it, fresh] = colls.try_emplace(in.collective_id, Coll{in.kind, in.group, {}});
            if (!fresh && (it->second.kind != in.kind || it->second.group != in.group)) {
              return core::internal_error(where(p, d, i) + ": collective id " +
                                          std::to_string(in.collective_id) + " used for different collectives");
            }
            if (!arrived_here[d]) {
              if (!it->second.arrived.insert(dev).second) {
                return core::internal_error(where(p, d, i) + ": device reaches collective " +
                                            std::to_string(in.collective_id) + " twice");
              }
              arrived_here[d] = 1;
            }
            if (it->second.arrived.size() < it->second.group.size()) {
              advance = false;
              break;
            }
            arrived_here[d] = 0;
            break;
          }
        }
        if (!advance) break;
        ++stats.instructions[d][std::string(instr_kind_name(in.kind))];
        ++pc[d];
        progress = true;
      }
      if (pc[d] < code.size()) done = false;
    }
    if (!done && !progress) {
      std::string msg = "deadlock:";
      for (std::size_t d = 0; d < n; ++d) {
        if (pc[d] < p.code[d].size()) msg += " " + where(p, d, pc[d]) + " waits;";
      }
      return core::internal_error(msg);
    }
  }
  for (std::size_t b = 0; b < p.buffers.size(); ++b) {
    if (state[b] == 1) {
      return core::internal_error("buffer b" + std::to_string(b) + " on device " +
                                  std::to_string(p.devices[static_cast<std::size_t>(p.buffers[b].device)]) +
                                  " is never freed");
    }
  }
  for (const auto& [key, q] : chan) {
    if (!q.empty()) {
      return core::internal_error(std::to_string(q.size()) + " sends from device " +
                                  std::to_string(p.devices[static_cast<std::size_t>(key.first)]) +
                                  " to device " + std::to_string(p.devices[static_cast<std::size_t>(key.second)]) +
                                  " are never received");
    }
  }
  return stats;
}

}  // namespace alpasim::exec
