#pragma once

#include <cstdint>
#include <vector>

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

/// Per mesh, a lower bound on the peak memory (bytes per GPU) that
/// sim::simulate_pipeline(problem) reports, computed without simulating (O(p·B·v)).
///
/// Why it is a bound (sim/pipeline_sim.cc): a device's memory is its static bytes
/// (parameters, gradients, optimizer states) plus the changes its compute tasks make at
/// their start and end, and those tasks run one at a time in program order
/// (build_schedule). Walking the program, each forward adds its stored activations (and
/// its forward working bytes until it ends), each backward adds its working bytes from its
/// start and frees them and its stored activations at its end; the simulator passes
/// through every state of this walk (or one with more bytes, when a start and an end fall
/// at the same instant). The received-ahead bytes of interleaved chunks are left out: each
/// is allocated before the backward that frees it, so leaving both out only lowers the sum.
core::Result<std::vector<std::int64_t>> peak_memory_lower_bound(const sim::PipelineProblem& problem);

/// True when some mesh's peak_memory_lower_bound exceeds its memory limit: the simulation
/// would report that the plan does not fit.
core::Result<bool> cannot_fit(const sim::PipelineProblem& problem);

}  // namespace alpasim::planner
