#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "core/status.h"
#include "cost_model/validated_error.h"
#include "driver/plan_point.h"
#include "driver/scenario.h"
#include "driver/sweep.h"

namespace alpasim::driver {

/// A node range of a candidate: every size min, min + step, ..., max is allowed; the study
/// searches it (docs/capacity.md) instead of planning every size.
struct NodeRange {
  std::int64_t min = 1;
  std::int64_t max = 1;   ///< max - min is a multiple of step
  std::int64_t step = 1;  ///< e.g. 4 to buy whole 32-GPU scalable units of 8-GPU nodes
};

/// One hardware option of a capacity study.
struct CapacityCandidate {
  std::string preset;                 ///< cluster preset (GPU kind + fabric)
  double price_usd_per_gpu_hour = 0;  ///< what one GPU of this kind costs per hour
  /// Where the price comes from: "scenario", or the default's source (default_gpu_price).
  std::string price_source;
  std::vector<std::int64_t> nodes;  ///< listed node counts, ascending (empty with range)
  std::optional<NodeRange> range;   ///< a node range to search (nodes empty then)
};

/// Turns compute time into wall-clock time: failures, restarts and checkpoints
/// (docs/capacity.md "Goodput"). Defaults come from published large runs.
struct GoodputSpec {
  bool ideal = false;  ///< "goodput": "ideal": no failures, no checkpoints (100 %)
  /// Mean GPU-hours between job-stopping failures, per GPU: Llama 3 405B's 419 unexpected
  /// interruptions in 54 days on 16,384 H100 (Dubey et al. 2024, section 3.3.4).
  double mtbf_gpu_hours = 16384.0 * 54 * 24 / 419;
  /// Seconds from a failure to training again (rescheduling, NCCL set-up, loading the
  /// checkpoint), not counting the lost work. An assumption (docs/capacity.md): no
  /// published figure for conventional checkpoint-restart was adopted.
  double restart_s = 600;
  /// Checkpoint write bandwidth per GPU: Llama 3's storage sustains 2 TB/s for the 16,384
  /// GPUs of its training (Dubey et al. 2024, section 3.3.1).
  double checkpoint_write_gbyte_per_s_per_gpu = 2000.0 / 16384;
  /// Compute seconds between checkpoints; unset: the interval that maximises goodput.
  std::optional<double> checkpoint_interval_s;
};

/// The scenario's "capacity" block (docs/capacity.md).
struct CapacitySpec {
  /// Exactly one of the two: tokens (transformers: iterations = ceil(tokens / (global
  /// batch × seq_len))) or iterations.
  std::optional<double> tokens_to_train;
  std::optional<std::int64_t> iterations;
  double deadline_days = 0;  ///< wall-clock days the training must finish in
  std::vector<CapacityCandidate> candidates;
  /// planner::search mode for every option, whatever the scenario's search block says;
  /// "" (absent): the scenario's search (its fixed plan, or "alpa").
  std::string planner;
  GoodputSpec goodput;
};

/// The default price of one GPU-hour of `gpu` (GpuSpec::name) and its source; nullopt for
/// a GPU without a documented default (the scenario must then give one).
struct GpuPrice {
  double usd_per_gpu_hour = 0;
  std::string source;
};
std::optional<GpuPrice> default_gpu_price(const std::string& gpu);

/// Reads and strictly validates a "capacity" block.
core::Result<CapacitySpec> parse_capacity(const core::JsonValue& value);
/// parse_capacity on the scenario's kept block (an error when the scenario has none).
core::Result<CapacitySpec> capacity_of(const Scenario& scenario);

/// Wall-clock efficiency of a training run under failures and checkpoints.
struct Goodput {
  /// Compute time / wall-clock time, in [0, 1]; 0: failures come faster than a restart
  /// and the work between checkpoints, so the run never finishes.
  double fraction = 1;
  double cluster_mtbf_s = 0;          ///< mean time between failures of the whole cluster
  double checkpoint_write_s = 0;      ///< one checkpoint, training stopped
  double checkpoint_interval_s = 0;   ///< compute time between checkpoints
  double expected_failures = 0;       ///< over the whole run
};
/// First-order model (Young 1974, Daly 2006): with cluster MTBF M = mtbf_gpu_hours / GPUs,
/// restart R, checkpoint write δ = checkpoint_bytes / (GPUs × bandwidth) and interval τ,
/// wall = compute × (1 + δ/τ) / (1 − (R + τ/2) / M). The default τ minimises it:
/// τ = −δ + sqrt(δ² + 2δ(M − R)).
Goodput goodput_of(const GoodputSpec& spec, std::int64_t num_gpus, double checkpoint_bytes,
                   double compute_s);

/// One (candidate, node count) option that was planned.
struct CapacityOption {
  std::size_t candidate = 0;  ///< index into CapacitySpec::candidates
  std::int64_t nodes = 0;
  /// Why it was planned: "listed", "ladder" (doubling from the range's min, and its max) or
  /// "bisection" (searching the smallest size that fits or meets the deadline).
  std::string found_by;
  PointRow row;                ///< the planned point (plan, iteration time, memory)
  // The rest is valid when row.ok.
  double compute_time_s = 0;   ///< iterations × iteration time
  Goodput goodput;
  double time_to_train_s = 0;  ///< wall clock: compute / goodput (infinity when 0)
  /// The ± band of the cost model's validated error (cost_model::validated_error).
  double time_to_train_low_s = 0, time_to_train_high_s = 0;
  double gpu_hours = 0;  ///< wall-clock hours × GPUs (what is paid for)
  double cost_usd = 0, cost_low_usd = 0, cost_high_usd = 0;
  double mfu = 0;        ///< model FLOP/s per GPU / the GPU's peak in the training dtype
  double tokens_per_s_per_gpu = 0;  ///< while computing (0 for models without tokens)
  bool meets_deadline = false;  ///< planned, fits memory and finishes by the deadline
  bool meets_deadline_at_band_high = false;  ///< even at the slow end of the band
};

/// The answers for one candidate kind (indices into CapacityResult::options).
struct CandidateAnswer {
  std::optional<std::size_t> smallest_fitting;
  std::optional<std::size_t> smallest_meeting_deadline;
  std::optional<std::size_t> fastest;  ///< least wall-clock time among fitting options
  std::optional<std::size_t> cheapest_meeting_deadline;
  cost_model::ValidatedError band;  ///< of this kind's GPU in the scenario's dtype
};

/// The answer of a capacity study.
struct CapacityResult {
  std::string scenario_name;
  std::string scenario_file;
  CapacitySpec spec;
  std::int64_t iterations = 0;      ///< iterations to train
  double tokens_per_iteration = 0;  ///< 0 for models without tokens
  double checkpoint_bytes = 0;      ///< weights + optimizer state, written per checkpoint
  std::vector<CapacityOption> options;  ///< candidate order, then node count
  std::vector<CandidateAnswer> answers;  ///< per candidate
  /// The cheapest option meeting the deadline (ties: fewer GPUs, then earlier candidate).
  std::optional<std::size_t> cost_optimal;
  /// The option with the least wall-clock time (ties: fewer GPUs, then earlier candidate).
  std::optional<std::size_t> fastest;
};

/// Plans the study with `fn`: every listed size, and for a node range the doubling ladder
/// from its min (and its max), then bisections for the smallest size that fits and the
/// smallest that meets the deadline. Deterministic whatever `options.threads`.
core::Result<CapacityResult> run_capacity(const Scenario& scenario, const PlanPointFn& fn,
                                          const RunOptions& options);

/// The roles option `i` plays in the answer ("cost-optimal", "fastest", "smallest of its
/// kind meeting the deadline", ...), most important first; empty for the others.
std::vector<std::string> capacity_roles(const CapacityResult& result, std::size_t i);

/// The study as JSON (sorted keys, units in names).
core::Json capacity_to_json(const CapacityResult& result);
/// One CSV line per option.
std::string capacity_to_csv(const CapacityResult& result);

/// Runs `alpa-sim capacity`: plans every option, writes the outputs the command names and
/// returns what to print on stdout.
core::Result<std::string> capacity_command(const StudyCommand& command);

}  // namespace alpasim::driver
