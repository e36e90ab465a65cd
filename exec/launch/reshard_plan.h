#pragma once

// The copy plan of a resharding instruction (an ALL_GATHER with one input, exec/instruction.h):
// which strided boxes each member copies from which member's source block into its
// destination block. Plain C++, shared by both CUDA modes (exec/cuda/cuda_backend.cc,
// nccl_rank.cc) and unit-tested on the host against an element-by-element reference
// (tests/unit/exec_launch/reshard_plan_test.cc).
//
// Semantics (the CPU backend's, exec/cpu/cpu_backend.cc): member d's destination block is
// filled, member by member in rank order, with the intersection of each member's source
// block, times Instruction::scale; so where several source blocks overlap (replicated
// sources), the highest rank's value is the one left. The plan copies each destination
// element from that member only, so a destination element is written at most once: the
// pieces of one destination are disjoint and may run in any order or concurrently, and a
// replicated source is sent once, not once per replica. Destination elements no source
// block covers are not written (as on the CPU backend).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/instruction.h"

namespace alpasim::exec::launch {

/// Axes a strided copy may have after merging contiguous ones (exec/cuda's copy kernel
/// takes this many by value). Tensors of the executor have rank <= 5 (convolutions, NHWC
/// plus a group axis), so merging never needs more.
inline constexpr int kMaxCopyAxes = 8;

/// One block of a global row-major tensor: where it starts and its extent, per axis
/// (elements). Rank 0 (a scalar) has empty vectors and one element.
struct Block {
  std::vector<std::int64_t> offset;
  std::vector<std::int64_t> shape;
};

/// One strided copy from a source member's buffer to a destination member's buffer:
/// element (i_0, ..., i_{n-1}), 0 <= i_a < extent[a], goes from
/// src_offset + sum_a i_a·src_stride[a] to dst_offset + sum_a i_a·dst_stride[a] (elements,
/// fp32). Axes are merged where both sides are contiguous across them and extent-1 axes
/// dropped, so the last axis always has stride 1 on both sides (a contiguous run) and a
/// whole-block copy has one axis.
struct BoxCopy {
  std::int32_t source = -1;       ///< rank (position in Instruction::group) of the source member
  std::int32_t destination = -1;  ///< rank of the destination member
  std::vector<std::int64_t> extent;  ///< 1..kMaxCopyAxes axes, each >= 1
  std::int64_t src_offset = 0;
  std::vector<std::int64_t> src_stride;
  std::int64_t dst_offset = 0;
  std::vector<std::int64_t> dst_stride;

  /// Product of the extents.
  std::int64_t elements() const;
};

/// Copies of blocks `sources[r]` into blocks `destinations[d]` of one global tensor (all
/// of the same rank), with the semantics of the file comment: ordered by destination, then
/// by source rank decreasing, then by box (deterministic). Pieces of one destination are
/// disjoint. ALPASIM_CHECK: every block has the rank of the first.
std::vector<BoxCopy> plan_block_copies(const std::vector<Block>& sources, const std::vector<Block>& destinations);

/// The copy plan of one resharding instruction, for every member.
struct ReshardPlan {
  std::vector<std::int32_t> group;       ///< Instruction::group (device indices in rank order)
  std::vector<BufferId> source_buffer;   ///< per rank: its `inputs[0]`
  std::vector<BufferId> destination_buffer;  ///< per rank: its `buffer`
  std::vector<BoxCopy> copies;           ///< plan_block_copies order
  float scale = 1.0f;                    ///< applied to every copied element

  /// Elements member `source` sends to member `destination` (ranks), summed over copies.
  std::int64_t elements(std::int32_t source, std::int32_t destination) const;
};

/// The plan of `program.code[device][instruction]`, a resharding ALL_GATHER (one input). Every
/// member's source and destination buffers are found in its own program by collective_id.
/// kInvalidArgument naming the device and instruction when it is not a resharding
/// instruction, a member lacks the matching instruction, blocks differ in rank from the
/// global shape, or a block has more than kMaxCopyAxes axes after merging.
core::Result<ReshardPlan> reshard_plan(const Program& program, std::size_t device, std::size_t instruction);

/// The exchange of one member in the one-process-per-GPU mode (exec/cuda/nccl_rank.cc):
/// what it copies locally, and per peer the copies it packs into one contiguous send
/// staging range and unpacks from one receive range, in plan order on both sides (so the
/// sender's packing and the receiver's unpacking agree without exchanging metadata).
struct ReshardExchange {
  std::vector<std::size_t> local;  ///< indices into ReshardPlan::copies: source == destination == me
  /// peer rank -> indices of copies me -> peer (plan order), packed back to back.
  std::map<std::int32_t, std::vector<std::size_t>> send;
  /// peer rank -> indices of copies peer -> me (plan order), unpacked back to back.
  std::map<std::int32_t, std::vector<std::size_t>> recv;
  std::int64_t send_elements = 0;  ///< total over peers (one staging buffer, peers in map order)
  std::int64_t recv_elements = 0;
};

/// The exchange of member `me` (a rank of plan.group).
ReshardExchange reshard_exchange(const ReshardPlan& plan, std::int32_t me);

/// `copy` with its destination replaced by a contiguous range starting at element `at`
/// (packing into a staging buffer; the source side unchanged).
BoxCopy packed_destination(const BoxCopy& copy, std::int64_t at);
/// `copy` with its source replaced by a contiguous range starting at element `at`
/// (unpacking from a staging buffer; the destination side unchanged).
BoxCopy packed_source(const BoxCopy& copy, std::int64_t at);

/// Whether `in` is a resharding copy (exec/instruction.h: ALL_GATHER with one input).
bool is_reshard(const Instruction& in);

/// Runs one copy on host arrays (the reference semantics of the device copy kernels):
/// dst[...] = src[...] · scale over the box.
void apply_copy_on_host(const BoxCopy& copy, const float* src, float* dst, float scale);

/// "src r1 -> dst r0: extent [2, 4] src +8 [16, 1] dst +0 [4, 1]" (test messages).
std::string copy_to_text(const BoxCopy& copy);

}  // namespace alpasim::exec::launch
