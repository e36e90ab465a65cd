#pragma once

#include <cstdint>

#include "core/status.h"
#include "exec/instruction.h"
#include "exec/launch/comm_plan.h"

namespace alpasim::exec::launch {

/// Stream of one rank in the one-process-per-GPU mode (exec/cuda/nccl_rank.cc).
inline constexpr std::int32_t kComputeStream = -2;     ///< RUN, ALLOCATE, FREE, a SEND's staging copy
inline constexpr std::int32_t kCollectiveStream = -1;  ///< every collective, in program order
// >= 0: the channel stream of CommPlan group g (SEND on the sender, RECV on the receiver).

/// The stream instruction `in` of device index `rank` runs on (for a SEND: the channel
/// stream; its staging copy runs on kComputeStream first). Precondition: `plan` is
/// comm_plan() of the program holding `in`.
std::int32_t stream_of(const Instruction& in, std::int32_t rank, const CommPlan& plan);

/// Replays the GPU schedule nccl_rank.cc builds, on the host, without a GPU: per device, a
/// FIFO per stream; an operation waits for the last operation on another stream that used
/// one of its buffers (issue order); a SEND is a staging copy on the compute stream then
/// the send on its channel stream; a SEND and the RECV of the same ordinal on a channel
/// complete together once both have started, a collective once every member has started.
/// A resharding copy (exec/launch/reshard_plan.h) is a collective here: on the GPU only the
/// pairs that exchange data wait for each other (grouped ncclSend/ncclRecv), a subset of
/// the replay's all-members wait, so a schedule the replay completes also completes there.
/// ok when every operation completes; kInternal "stream schedule deadlock: rank R stuck at
/// instruction #i (kind) on stream S; ..." otherwise. This is the CI check of the claim in
/// exec/cuda/README.md that a program verify_program accepts cannot deadlock on streams.
core::Status check_stream_schedule(const Program& program, const CommPlan& plan);

}  // namespace alpasim::exec::launch
