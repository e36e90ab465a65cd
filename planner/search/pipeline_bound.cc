#include "planner/search/pipeline_bound.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "sim/schedule.h"

namespace alpasim::planner {

core::Result<sim::Time> pipeline_lower_bound(const sim::PipelineProblem& problem) {
  const int p = static_cast<int>(problem.meshes.size());
  const int v = problem.interleave;
  const int m = problem.num_microbatches;
  ALPASIM_ASSIGN_OR_RETURN(std::vector<std::vector<sim::ScheduledOp>> programs,
                           sim::build_schedule(problem.schedule, p, m, v));
  const auto stage = [&](int vs) -> const sim::StageCosts& {
    return problem.stages[static_cast<std::size_t>(vs)];
  };
  // Per-op durations exactly as the lowering rounds them (each to_time separately; the
  // backward's bucket parts sum exactly to to_time(backward_s)).
  const auto fwd = [&](int vs) { return sim::to_time(stage(vs).forward_s); };
  const auto bwd = [&](int vs) {
    return sim::to_time(stage(vs).recompute_s) + sim::to_time(stage(vs).backward_s);
  };
  std::vector<sim::Time> opt(static_cast<std::size_t>(p), 0);
  for (int d = 0; d < p; ++d) {
    core::Seconds step{0};  // summed in chunk order, as the lowering does
    for (int c = 0; c < v; ++c) step += stage(c * p + d).optimizer_step_s;
    opt[static_cast<std::size_t>(d)] = sim::to_time(step);
  }
  sim::Time bound = 0;
  sim::Time fill = 0;  // Σ_{vs<d} T(forward_vs): microbatch 0's chain to device d
  for (int d = 0; d < p; ++d) {
    const auto& prog = programs[static_cast<std::size_t>(d)];
    sim::Time busy = opt[static_cast<std::size_t>(d)];
    int last_vs = -1;
    for (const sim::ScheduledOp& op : prog) {
      const int vs = op.chunk * p + d;
      if (op.type == sim::ScheduledOp::Type::kForward) {
        busy += fwd(vs);
      } else {
        busy += bwd(vs);
        last_vs = vs;
      }
    }
    // The fill chain holds only when the device starts with chunk 0's first forward.
    const bool starts_at_chunk0 = !prog.empty() &&
                                  prog.front().type == sim::ScheduledOp::Type::kForward &&
                                  prog.front().chunk == 0 && prog.front().microbatch == 0;
    const sim::Time start = starts_at_chunk0 ? fill : 0;
    bound = std::max(bound, start + busy);
    if (last_vs > 0) {
      sim::Time drain = 0;
      for (int vs = last_vs - 1; vs >= 0; --vs) drain += bwd(vs);
      bound = std::max(bound, start + busy - opt[static_cast<std::size_t>(d)] + drain + opt[0]);
    }
    fill += fwd(d);
  }
  return bound;
}

core::Result<std::vector<std::int64_t>> peak_memory_lower_bound(const sim::PipelineProblem& problem) {
  const int p = static_cast<int>(problem.meshes.size());
  const int v = problem.interleave;
  ALPASIM_ASSIGN_OR_RETURN(std::vector<std::vector<sim::ScheduledOp>> programs,
                           sim::build_schedule(problem.schedule, p, problem.num_microbatches, v));
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(p), 0);
  for (int d = 0; d < p; ++d) {
    std::int64_t bytes = 0;
    for (int c = 0; c < v; ++c) {
      const sim::StageCosts& st = problem.stages[static_cast<std::size_t>(c * p + d)];
      bytes += st.parameter_bytes.value() + st.gradient_bytes.value() + st.optimizer_state_bytes.value();
    }
    std::int64_t peak = bytes;
    for (const sim::ScheduledOp& op : programs[static_cast<std::size_t>(d)]) {
      const sim::StageCosts& st = problem.stages[static_cast<std::size_t>(op.chunk * p + d)];
      if (op.type == sim::ScheduledOp::Type::kForward) {
        bytes += st.stored_activation_bytes.value();
        peak = std::max(peak, bytes + st.forward_working_activation_bytes.value());
      } else {
        peak = std::max(peak, bytes + st.working_activation_bytes.value());
        bytes -= st.stored_activation_bytes.value();
      }
    }
    peaks[static_cast<std::size_t>(d)] = peak;
  }
  return peaks;
}

core::Result<bool> cannot_fit(const sim::PipelineProblem& problem) {
  ALPASIM_ASSIGN_OR_RETURN(std::vector<std::int64_t> peaks, peak_memory_lower_bound(problem));
  for (std::size_t d = 0; d < peaks.size(); ++d) {
    const std::int64_t limit = problem.meshes[d].memory_limit.value();
    if (limit > 0 && peaks[d] > limit) return true;
  }
  return false;
}

}  // namespace alpasim::planner
