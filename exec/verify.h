#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/instruction.h"

namespace alpasim::exec {

/// What the static check of a program found (all per device, in Program::devices order).
struct ProgramStats {
  /// Most bytes allocated at once (plan dtype): the memory high-water mark the simulator's
  /// prediction for the same plan is to be compared with.
  std::vector<std::int64_t> peak_bytes;
  /// At the peak, the bytes per BufferRole name ("parameters", "activations", ...).
  std::vector<std::map<std::string, std::int64_t>> peak_breakdown;
  /// Instructions per kind name.
  std::vector<std::map<std::string, std::int64_t>> instructions;
  /// Bytes sent (plan dtype) per device.
  std::vector<std::int64_t> sent_bytes;
};

/// Runs the program symbolically, all devices in lock step, and checks:
///  - every RECV matches the oldest unmatched SEND of its (sender, receiver) channel, with
///    the same tag and element count (NCCL's in-order point-to-point rule);
///  - every collective is reached by exactly the devices of its group, with the same kind;
///  - no deadlock (SEND is buffered, RECV and collectives block): on a stall the error names
///    each blocked device and its instruction;
///  - buffers are allocated once before use, used only on their device, freed exactly once,
///    and nothing is left allocated or unreceived at the end.
core::Result<ProgramStats> verify_program(const Program& program);

/// The memory high-water mark of each device (bytes at the plan dtype), from the
/// ALLOCATE/FREE order alone.
std::vector<std::int64_t> memory_high_water(const Program& program);

}  // namespace alpasim::exec
