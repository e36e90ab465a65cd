#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/instruction.h"

namespace alpasim::exec {

/// How a program is run.
struct RunOptions {
  int warmup_iterations = 0;  ///< run, not measured
  int iterations = 1;         ///< measured; every iteration starts from the initial weights
  /// A blocked RECV or collective gives up after this long and the whole run aborts with an
  /// error naming the device and instruction (never a hang).
  double timeout_s = 60.0;
  /// CPU backend: refuse (kResourceExhausted) a program whose fp32 buffers, summed over the
  /// devices' high-water marks, would exceed this; the CPU backend is for small models.
  std::int64_t host_memory_limit_bytes = std::int64_t{8} << 30;
  /// Copy every gradient and parameter back to the host (ExecutionResult::gradients and
  /// ::parameters; what the backend comparisons read). false: the loss alone, for a
  /// measuring run (alpa-exec): with one process per GPU each rank would otherwise ship its
  /// values to the launcher as text (GPT 350M: 0.7 G values, minutes of encoding).
  bool report_values = true;
};

/// Measured time of one instruction (the last measured iteration).
struct InstrTiming {
  std::int32_t device = 0;       ///< index into Program::devices
  std::int32_t instruction = 0;  ///< index into Program::code[device]
  std::int64_t start_ns = 0;     ///< from the iteration's start (all devices share the clock)
  std::int64_t end_ns = 0;
};

/// What a run produced: numbers to compare against a reference, and timings.
struct ExecutionResult {
  std::string backend;  ///< "cpu" or "cuda"
  /// Mean over microbatches and devices of each shard's mean loss: the loss of the batch.
  double loss = 0;
  /// Gradient of each parameter after the data-parallel sync (the optimizer's input), by
  /// parameter name. Empty when RunOptions::report_values is false.
  std::map<std::string, std::vector<float>> gradients;
  /// Each parameter after the optimizer step, by name (empty likewise).
  std::map<std::string, std::vector<float>> parameters;
  /// Wall time of each measured iteration, seconds.
  std::vector<double> iteration_s;
  /// Per instruction of the last measured iteration, device by device in program order.
  std::vector<InstrTiming> timings;
  /// CPU backend only (empty elsewhere), per device in Program::devices order, over the whole
  /// run: the high-water mark its counting allocator measured (exec/cpu/counting_allocator.h).
  /// `measured_peak_host_bytes`: heap bytes of the program's buffers as stored (fp32).
  /// `measured_peak_plan_bytes`: the same allocations counted at the plan dtype's element
  /// size, comparable with verify_program's static peak_bytes and the simulator's peak.
  /// `measured_peak_workspace_bytes`: kernel scratch outside the program's buffers
  /// (accumulation targets, a sharded parameter's whole tensor while it is initialised);
  /// a GPU backend would hold its own workspace, so it is reported apart.
  std::vector<std::int64_t> measured_peak_host_bytes;
  std::vector<std::int64_t> measured_peak_plan_bytes;
  std::vector<std::int64_t> measured_peak_workspace_bytes;
};

/// A way to run programs (STYLE.md 9.6: plain C++; the CUDA backend implements it in
/// exec/cuda/ without leaking CUDA types).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual core::Result<ExecutionResult> run(const Program& program, const RunOptions& options) = 0;
};

}  // namespace alpasim::exec
