#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "sim/engine.h"
#include "sim/pipeline_problem.h"
#include "sim/task_graph.h"
#include "sim/trace_writer.h"

namespace alpasim::sim {

/// Memory components of a pipeline device, in the order of the per-component arrays.
enum class MemoryComponent : std::uint8_t {
  kParameters,
  kGradients,
  kOptimizerStates,
  kStoredActivations,   ///< kept between a microbatch's forward and backward
  kWorkingActivations,  ///< transient during recomputation and backward
};
/// Number of MemoryComponent values.
inline constexpr int kNumMemoryComponents = 5;
/// "parameters", "gradients", "optimizer_states", "stored_activations", "working_activations".
const char* memory_component_name(MemoryComponent component);

/// Stream names of every pipeline device, in creation order (trace track order).
inline constexpr const char* kPipelineStreams[] = {"compute", "send_next", "send_prev", "reshard",
                                                   "grad_sync"};

/// A device whose peak memory exceeds its limit.
struct MemoryOverflow {
  int device = 0;                 ///< pipeline stage (mesh) index
  std::int64_t limit_bytes = 0;  ///< per GPU
  std::int64_t peak_bytes = 0;   ///< per GPU
  std::int64_t excess_bytes = 0;  ///< peak - limit, > 0
  MemoryComponent largest = MemoryComponent::kParameters;  ///< biggest component at the peak
  /// "device 3 (stage 3) needs 85.20 GiB at its peak (t=1.234567 s) but has 80.00 GiB: over
  /// by ...; parameters ..., ...; the largest component is stored activations (12
  /// microbatch-chunks in flight)".
  std::string message;
};

/// Results for one simulated device (the representative GPU of a pipeline stage's mesh).
struct PipelineDeviceReport {
  int device = 0;                 ///< pipeline stage (mesh) index
  core::Seconds compute_busy{0};  ///< time the compute stream ran tasks
  core::Seconds compute_idle{0};  ///< iteration time - compute_busy
  core::Seconds communication_busy{0};        ///< union of communication intervals
  core::Seconds communication_overlapped{0};  ///< of which compute ran at the same time
  core::Seconds communication_exposed{0};     ///< of which compute was idle
  /// Exposed part (compute idle) of: cross-stage sends and receives; Alpa's local
  /// all-gathers; gradient reduce(-scatter)s and parameter all-gathers. May overlap.
  core::Seconds p2p_exposed{0};
  core::Seconds reshard_exposed{0};    ///< see p2p_exposed
  core::Seconds grad_sync_exposed{0};  ///< see p2p_exposed
  /// Blocking intra-op collectives inside the compute tasks (StageCosts::*_tp_comm_s):
  /// counted in compute_busy by the engine, reported here so it is not mistaken for math.
  core::Seconds tensor_parallel_communication{0};
  std::int64_t peak_memory_bytes = 0;  ///< per GPU
  core::Seconds peak_memory_time{0};   ///< first time the peak was reached
  std::vector<std::int64_t> peak_memory_by_component;  ///< MemoryComponent order
  int max_in_flight = 0;  ///< most (microbatch, chunk) activation sets held at once
};

/// Traffic of one network link over the iteration.
struct LinkReport {
  std::string name;                    ///< LinkSpec::name
  double bytes = 0;                    ///< carried during the iteration
  double utilisation = 0;              ///< bytes / (capacity × iteration time), 0..1
  core::BytesPerSecond peak_rate{0};   ///< highest rate carried at any time
};

/// Whole-iteration results. TFLOP/s follow Megatron-LM (Narayanan et al. 2021, §5.1):
/// model FLOPs exclude recomputation, hardware FLOPs include it; both are divided by
/// (number of GPUs × iteration time).
struct PipelineReport {
  core::Seconds iteration_time{0};  ///< end of the last task
  int num_gpus = 0;  ///< Σ mesh GPUs × data_parallel
  core::Flops model_flops{0};     ///< per iteration, all GPUs
  core::Flops hardware_flops{0};  ///< per iteration, all GPUs
  core::FlopsPerSecond model_flops_per_gpu{0};     ///< model FLOPs / (GPUs × iteration time)
  core::FlopsPerSecond hardware_flops_per_gpu{0};  ///< hardware FLOPs / (GPUs × iteration time)
  /// Mean over devices of compute idle / iteration time: pipeline fill and drain plus any
  /// exposed communication and optimizer imbalance.
  double bubble_fraction = 0;
  /// Σ compute idle / Σ compute busy over devices: Megatron-LM's "bubble time fraction"
  /// (p-1)/m, or (p-1)/(v·m) interleaved, when stages are uniform and nothing else idles.
  double bubble_to_compute_ratio = 0;
  std::int64_t peak_memory_bytes = 0;  ///< max over devices
  core::Seconds communication_exposed{0};     ///< max over devices
  core::Seconds communication_overlapped{0};  ///< on the device with the most exposed
  std::vector<PipelineDeviceReport> devices;  ///< one per pipeline stage
  std::vector<MemoryOverflow> overflows;  ///< empty when everything fits
  std::vector<LinkReport> links;          ///< one per PipelineProblem::links entry
  std::uint64_t events_processed = 0;  ///< engine events of the run

  /// OK, or RESOURCE_EXHAUSTED with the overflow messages joined by "; ".
  core::Status memory_status() const;
};

/// A lowered and simulated pipeline: the task graph, its timeline and the report.
struct PipelineSimulation {
  TaskGraph graph;
  Timeline timeline;
  PipelineReport report;
};

/// The trace's nested events (index = TaskId): the blocking intra-op collectives
/// (StageCosts::forward/backward/recompute_collectives) of every whole compute task, and
/// the collectives of every gradient-sync, parameter all-gather and stage-boundary
/// all-gather task (grad_sync_/param_all_gather_/reshard_collectives; a bucket's task
/// shows its 1/buckets share of each). Each collective one event, with bytes, group and
/// algorithm in its args, placed in order with the task's compute split evenly between
/// them. Split backward parts (grad-sync buckets) get none. Above `max_events` in all, only the tasks of the first and last 4
/// microbatches keep theirs (the pipeline's fill and drain; the steady state repeats them),
/// so a trace stays a few MB: GPT-3 175B on 1,024 GPUs has 111k. Deterministic; empty where
/// the lowering lists no collectives.
std::vector<std::vector<TraceSlice>> collective_trace_slices(const PipelineProblem& problem,
                                                             const TaskGraph& graph,
                                                             const Timeline& timeline,
                                                             std::size_t max_events = 50000);

/// Builds the task graph of one iteration: per stage mesh a device with streams
/// kPipelineStreams; forward/recompute/backward tasks in schedule order; cross-stage
/// sends (and local all-gathers); gradient synchronisation; optimizer step. Errors from
/// validate() and build_schedule() are returned as they are.
///
/// Symmetry shortcut: one device stands for every GPU of its mesh and for the same mesh
/// in every data-parallel replica. Those GPUs run identical programs on identical
/// hardware and meet only in collectives that all of them enter and leave together
/// (tensor-parallel collectives inside the stage times, the data-parallel gradient
/// collective), so their timelines are identical and simulating dp × tp copies would
/// only multiply the events. Network sharing between replicas is captured by the routes
/// (a link's capacity is the representative GPU's share). The shortcut stops being exact
/// for heterogeneous replicas, which this problem format cannot express.
core::Result<TaskGraph> lower_pipeline(const PipelineProblem& problem);

/// Lowers, simulates and reports. A plan that does not fit is still simulated; its
/// report lists the overflows (see PipelineReport::memory_status()).
core::Result<PipelineSimulation> simulate_pipeline(const PipelineProblem& problem);

/// A human-readable multi-line summary (units on every number).
std::string format_report(const PipelineReport& report);

/// The report as JSON (2-space indent, fixed key order, units in key names:
/// iteration_time_s, model_tflops_per_gpu, hardware_tflops_per_gpu, bubble_fraction,
/// peak_memory_bytes, communication_exposed_s, ..., devices[], memory_overflows[]).
/// Deterministic: the same report gives the same text.
std::string report_json(const PipelineReport& report);

}  // namespace alpasim::sim
