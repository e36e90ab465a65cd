#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace alpasim::sim {

/// Pipeline schedules of one training iteration (with a flush at the end).
enum class PipelineSchedule : std::uint8_t {
  kGPipe,             ///< all forwards, then all backwards (Huang et al. 2019)
  kOneFOneB,          ///< PipeDream-flush / Megatron 1F1B (Narayanan et al. 2021, §2.2.1)
  kInterleaved1F1B,   ///< Megatron interleaved 1F1B with v model chunks per device (§2.2.2)
};

/// "gpipe", "1f1b" or "interleaved_1f1b".
std::string_view schedule_name(PipelineSchedule schedule);
/// The inverse of schedule_name; INVALID_ARGUMENT naming the accepted spellings otherwise.
core::Result<PipelineSchedule> parse_schedule(std::string_view name);

/// One step of a device's compute program.
struct ScheduledOp {
  /// Forward or backward pass.
  enum class Type : std::uint8_t { kForward, kBackward };
  Type type = Type::kForward;
  std::int32_t microbatch = 0;  ///< 0-based
  std::int32_t chunk = 0;       ///< model chunk on this device, 0..v-1; its virtual stage is chunk·p + device
  friend bool operator==(const ScheduledOp&, const ScheduledOp&) = default;
};

/// The ordered forward/backward program of every device (index = pipeline stage
/// 0..p-1). Recomputation, when enabled, runs right before each backward and is added
/// by the lowering, not here.
///
/// - GPipe: F0..F(B-1), then B0..B(B-1).
/// - 1F1B: min(p-s-1, B) warm-up forwards, then alternating F/B, then the remaining
///   backwards; stage s holds at most min(p-s, B) microbatches in flight.
/// - Interleaved 1F1B (Megatron-LM schedules.py): B·v virtual microbatches per device;
///   forward k runs chunk (k mod p·v)/p of microbatch ⌊k/(p·v)⌋·p + k mod p, backward k
///   the chunk v-1-(k mod p·v)/p; warm-up (p-s-1)·2 + (v-1)·p (all of them when B = p).
///   Requires B to be a multiple of p (INVALID_ARGUMENT otherwise), as Megatron-LM does.
/// `interleave` must be 1 unless the schedule is interleaved.
core::Result<std::vector<std::vector<ScheduledOp>>> build_schedule(PipelineSchedule schedule,
                                                                   int num_stages,
                                                                   int num_microbatches,
                                                                   int interleave);

/// The most (microbatch, chunk) pairs whose forward has run and whose backward has not,
/// over a device program: the activation sets the device holds at its peak.
int max_in_flight(const std::vector<ScheduledOp>& program);

/// max_in_flight of stage `stage` in closed form, O(1), for planners that check memory
/// without building schedules (Alpa §5's 1F1B memory check): GPipe B; 1F1B min(p - s, B);
/// interleaved min(w + 1, B·v) with w = (p - s - 1)·2 + (v - 1)·p, or B·v when B = p.
/// Each interleaved entry is one chunk's activations (1/v of the stage's layers).
/// Preconditions: the arguments are valid for build_schedule and 0 <= stage < p.
int max_in_flight_closed_form(PipelineSchedule schedule, int num_stages, int stage,
                              int num_microbatches, int interleave);

}  // namespace alpasim::sim
