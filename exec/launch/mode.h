#pragma once

#include <string>

#include "core/status.h"
#include "exec/launch/rank_env.h"

namespace alpasim::exec::launch {

/// How the CUDA backend runs a program (exec/cuda/README.md).
enum class CudaMode {
  kVirtual,  ///< every logical device on GPU 0 of this process (one process)
  kLaunch,   ///< this process starts one child per device (built-in launcher) and merges
  kRank,     ///< this process is one rank (a launcher child or an mpirun process)
};

/// What the user asked for: "auto" (default), "virtual" or "processes".
enum class CudaModeRequest { kAuto, kVirtual, kProcesses };

/// "virtual", "launch", "rank".
std::string cuda_mode_name(CudaMode mode);

/// Parses "auto" | "virtual" | "processes"; kInvalidArgument "<flag>: expected auto, virtual
/// or processes, got \"x\"".
core::Result<CudaModeRequest> parse_cuda_mode_request(const std::string& text, const std::string& flag);

/// The mode for a program of `program_devices` devices, given how this process was started
/// and how many GPUs it sees:
/// - started as a rank (launcher child or mpirun): kRank; kFailedPrecondition when the
///   world size differs from `program_devices` or the request is kVirtual;
/// - kAuto: kLaunch when program_devices > 1 and gpus_visible >= program_devices, else
///   kVirtual (one GPU, or a one-device program);
/// - kVirtual: kVirtual; kProcesses: kLaunch, kFailedPrecondition ("needs N GPUs, this
///   machine has G; use mpirun across nodes") when gpus_visible < program_devices.
/// gpus_visible < 1: kUnavailable (the caller reports no GPU, exit 77).
core::Result<CudaMode> choose_cuda_mode(const RankEnv& env, CudaModeRequest request, int gpus_visible,
                                        int program_devices);

}  // namespace alpasim::exec::launch
