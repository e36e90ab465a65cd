#include "exec/launch/mode.h"

namespace alpasim::exec::launch {

std::string cuda_mode_name(CudaMode mode) {
  switch (mode) {
    case CudaMode::kVirtual: return "virtual";
    case CudaMode::kLaunch: return "launch";
    case CudaMode::kRank: return "rank";
  }
  return "?";
}

core::Result<CudaModeRequest> parse_cuda_mode_request(const std::string& text, const std::string& flag) {
  if (text == "auto") return CudaModeRequest::kAuto;
  if (text == "virtual") return CudaModeRequest::kVirtual;
  if (text == "processes") return CudaModeRequest::kProcesses;
  return core::invalid_argument(flag + ": expected auto, virtual or processes, got \"" + text + "\"");
}

core::Result<CudaMode> choose_cuda_mode(const RankEnv& env, CudaModeRequest request, int gpus_visible,
                                        int program_devices) {
  if (gpus_visible < 1) return core::unavailable("no CUDA device visible to this process");
  if (env.source != RankSource::kNone) {
    if (request == CudaModeRequest::kVirtual) {
      return core::failed_precondition("virtual-device mode: expected a single process, got rank " +
                                       std::to_string(env.rank) + " of " + std::to_string(env.world_size));
    }
    if (env.world_size != program_devices) {
      return core::failed_precondition("one process per GPU: the plan has " + std::to_string(program_devices) +
                                       " devices but " + std::to_string(env.world_size) +
                                       " processes were started (mpirun -np must equal the plan's device count)");
    }
    return CudaMode::kRank;
  }
  switch (request) {
    case CudaModeRequest::kVirtual: return CudaMode::kVirtual;
    case CudaModeRequest::kProcesses:
      if (gpus_visible < program_devices) {
        return core::failed_precondition("one process per GPU: the plan needs " + std::to_string(program_devices) +
                                         " GPUs, this machine has " + std::to_string(gpus_visible) +
                                         "; use mpirun across nodes or the virtual-device mode");
      }
      return CudaMode::kLaunch;
    case CudaModeRequest::kAuto: break;
  }
  return program_devices > 1 && gpus_visible >= program_devices ? CudaMode::kLaunch : CudaMode::kVirtual;
}

}  // namespace alpasim::exec::launch
