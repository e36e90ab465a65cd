#include "exec/launch/stream_plan.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace alpasim::exec::launch {
namespace {

/// One GPU operation of the replay.
struct GpuOp {
  std::int32_t device = 0;
  std::int32_t instruction = 0;
  std::int32_t stream = kComputeStream;
  /// 0: completes alone; 1: send half; 2: recv half; 3: collective member.
  int comm = 0;
  std::int64_t match = -1;  ///< send/recv: ordinal on the channel; collective: collective_id
  std::int32_t channel = -1;
  std::vector<std::size_t> deps;
  bool done = false;
};

bool is_collective(InstrKind k) {
  return k == InstrKind::kAllReduce || k == InstrKind::kAllGather || k == InstrKind::kReduceScatter ||
         k == InstrKind::kAllToAll;
}

std::string stream_name(std::int32_t s) {
  if (s == kComputeStream) return "compute";
  if (s == kCollectiveStream) return "collective";
  return "channel " + std::to_string(s);
}

}  // namespace

std::int32_t stream_of(const Instruction& in, std::int32_t rank, const CommPlan& plan) {
  if (in.kind == InstrKind::kSend) return plan.channel.at({rank, in.peer});
  if (in.kind == InstrKind::kRecv) return plan.channel.at({in.peer, rank});
  if (is_collective(in.kind)) return kCollectiveStream;
  return kComputeStream;
}

core::Status check_stream_schedule(const Program& p, const CommPlan& plan) {
  std::vector<GpuOp> ops;
  for (std::size_t d = 0; d < p.code.size(); ++d) {
    const auto dev = static_cast<std::int32_t>(d);
    std::map<std::int32_t, std::size_t> tail;         // stream -> its last op (FIFO)
    std::map<BufferId, std::pair<std::int32_t, std::size_t>> last;  // buffer -> (stream, op)
    std::map<std::int32_t, std::int64_t> sent, received;  // channel -> ordinal
    auto add = [&](GpuOp op, const std::vector<BufferId>& buffers) {
      for (BufferId b : buffers) {
        auto it = last.find(b);
        if (it != last.end() && it->second.first != op.stream) op.deps.push_back(it->second.second);
      }
      if (auto t = tail.find(op.stream); t != tail.end()) op.deps.push_back(t->second);
      ops.push_back(std::move(op));
      tail[ops.back().stream] = ops.size() - 1;
      return ops.size() - 1;
    };
    for (std::size_t i = 0; i < p.code[d].size(); ++i) {
      const Instruction& in = p.code[d][i];
      std::vector<BufferId> buffers = in.inputs;
      if (in.buffer != kNoBuffer) buffers.push_back(in.buffer);
      GpuOp op;
      op.device = dev;
      op.instruction = static_cast<std::int32_t>(i);
      op.stream = stream_of(in, dev, plan);
      if (in.kind == InstrKind::kSend) {
        GpuOp copy = op;
        copy.stream = kComputeStream;
        const std::size_t c = add(copy, buffers);
        op.comm = 1;
        op.channel = op.stream;
        op.match = sent[op.channel]++;
        op.deps.push_back(c);
        add(op, {});
        for (BufferId b : buffers) last[b] = {kComputeStream, c};  // the source's last use is the copy
        continue;
      }
      if (in.kind == InstrKind::kRecv) {
        op.comm = 2;
        op.channel = op.stream;
        op.match = received[op.channel]++;
      } else if (is_collective(in.kind)) {
        op.comm = 3;
        op.match = in.collective_id;
      }
      const std::size_t k = add(op, buffers);
      for (BufferId b : buffers) last[b] = {ops[k].stream, k};
    }
  }
  // Partners: the send and receive of one ordinal on one channel; collective members.
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> pairs;
  std::map<std::int64_t, std::vector<std::size_t>> members;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].comm == 1 || ops[k].comm == 2) pairs[{ops[k].channel, ops[k].match}].push_back(k);
    if (ops[k].comm == 3) members[ops[k].match].push_back(k);
  }
  auto ready = [&](std::size_t k) {
    for (std::size_t d : ops[k].deps) {
      if (!ops[d].done) return false;
    }
    return true;
  };
  std::size_t remaining = ops.size();
  bool progress = true;
  while (remaining > 0 && progress) {
    progress = false;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      if (ops[k].done || !ready(k)) continue;
      std::vector<std::size_t> group{k};
      if (ops[k].comm == 1 || ops[k].comm == 2) group = pairs[{ops[k].channel, ops[k].match}];
      if (ops[k].comm == 3) group = members[ops[k].match];
      const std::size_t needed = ops[k].comm == 3 ? plan.groups[static_cast<std::size_t>(
                                                         plan.collective.at(p.code[static_cast<std::size_t>(ops[k].device)]
                                                                                  [static_cast<std::size_t>(ops[k].instruction)]
                                                                                      .group))]
                                                        .members.size()
                                 : ops[k].comm != 0 ? 2
                                                    : 1;
      if (group.size() < needed) continue;  // a partner that never comes: reported below
      bool all = true;
      for (std::size_t m : group) all = all && ready(m);
      if (!all) continue;
      for (std::size_t m : group) {
        ops[m].done = true;
        --remaining;
      }
      progress = true;
    }
  }
  if (remaining == 0) return core::ok_status();
  std::string msg = "stream schedule deadlock:";
  std::vector<bool> reported(p.code.size(), false);
  for (const GpuOp& op : ops) {
    const auto d = static_cast<std::size_t>(op.device);
    if (op.done || reported[d]) continue;
    reported[d] = true;
    const Instruction& in = p.code[d][static_cast<std::size_t>(op.instruction)];
    msg += " rank " + std::to_string(op.device) + " stuck at instruction #" + std::to_string(op.instruction) + " (" +
           std::string(instr_kind_name(in.kind)) + ") on stream " + stream_name(op.stream) + ";";
  }
  return core::internal_error(msg);
}

}  // namespace alpasim::exec::launch
