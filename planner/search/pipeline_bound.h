#pragma once

#include "core/status.h"
#include "sim/pipeline_problem.h"
#include "sim/time.h"

namespace alpasim::planner {

/// A lower bound, in the simulator's integer nanoseconds, on the makespan that
/// sim::simulate_pipeline(problem) reports, computed without simulating (O(p·B·v)).
///
/// Why it is a bound (sim/pipeline_sim.cc): every forward, recompute, backward and the
/// optimizer step of a device run one at a time on its FIFO compute stream with durations
/// to_time(...) of the stage costs; transfers and collectives only add waits. So for each
/// device d:
///   - its first op (forward of microbatch 0, chunk 0) waits for microbatch 0's forwards on
///     the virtual stages 0..d-1 (a dependency chain): start_d >= Σ_{vs<d} T(forward_vs);
///   - its stream is then busy for busy_d = Σ of its task durations;
///   - its last backward (microbatch m, virtual stage vs*) ends at >= start_d + busy_d -
///     T(optimizer_d) and is followed by the chain of microbatch m's recompute + backward on
///     the virtual stages vs*-1..0, then device 0's optimizer step (FIFO after them).
/// The bound is the maximum over devices of these chains. It ignores communication, so it is
/// exact for one stage without collectives. Errors: the schedule's (build_schedule).
core::Result<sim::Time> pipeline_lower_bound(const sim::PipelineProblem& problem);

}  // namespace alpasim::planner
