#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "exec/instruction.h"

namespace alpasim::exec::launch {

/// What a communicator carries (exec/cuda/README.md, "communicators").
enum class CommKind {
  kWorld,       ///< every rank: the start-of-iteration barrier
  kCollective,  ///< one collective group (a mesh axis): ALL_REDUCE ... ALL_TO_ALL
  kChannel,     ///< one direction between two devices: SENDs of `members[0]`, RECVs of `members[1]`
};

/// One NCCL communicator to create. Ranks are Program device indices.
struct CommGroup {
  CommKind kind = CommKind::kWorld;
  /// kWorld, kCollective: the group in NCCL rank order (as Instruction::group, which may be
  /// any order); kChannel: {sender, receiver}.
  std::vector<std::int32_t> members;
};

/// Every communicator a program needs, in one order that all ranks share: the world first,
/// then collective groups, then channels, each sorted (std::map order), so every rank calls
/// ncclCommInitRank for its groups in the same relative order.
struct CommPlan {
  std::vector<CommGroup> groups;
  /// Instruction::group -> index in `groups`.
  std::map<std::vector<std::int32_t>, std::int32_t> collective;
  /// (sender, receiver) -> index in `groups`.
  std::map<std::pair<std::int32_t, std::int32_t>, std::int32_t> channel;

  /// Indices of the groups `rank` belongs to, increasing.
  std::vector<std::int32_t> groups_of(std::int32_t rank) const;
  /// The NCCL rank of `rank` in group `group` (its position in `members`); -1 if absent.
  std::int32_t rank_in(std::int32_t group, std::int32_t rank) const;
};

/// The communicators of `program`. A channel is one direction so that, with one stream per
/// channel, the SENDs of a device never wait behind its RECVs (the lowering's sends are
/// buffered, exec/verify.h). kInvalidArgument for a collective without a group or a
/// member, SEND or RECV peer outside the program's devices, or a collective group with a
/// device twice; the message names the device index and instruction index.
core::Result<CommPlan> comm_plan(const Program& program);

}  // namespace alpasim::exec::launch
