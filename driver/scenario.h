#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "cluster/cluster_spec.h"
#include "core/dtype.h"
#include "core/json_reader.h"
#include "core/status.h"
#include "ir/model_config.h"
#include "schema/plan.h"
#include "sim/lowering/tp_overlap.h"

namespace alpasim::driver {

/// The scenario's "training" block.
struct TrainingConfig {
  std::int64_t global_batch_size = 0;  ///< sequences (transformers) or images per iteration
  /// fp8 means Transformer Engine's recipe: the block linears' GEMMs in fp8, everything
  /// else bf16 (fixed Megatron plans only; docs/scenario.md).
  core::DType dtype = core::DType::kFp16;
  /// "mxfp8" or "nvfp4" when the scenario asked for a Blackwell block-scaled format (the
  /// block linears' GEMMs in it, dtype kBf16 for everything else; fixed Megatron plans on
  /// a GPU that has the formats, else check_consistency names the GPU); else "".
  std::string block_scaled_dtype;
  std::string optimizer;  ///< "adam" (mixed precision: fp32 master weights + 2 moments) or "sgd"
  /// Microbatches per iteration; nullopt = "auto" (the planner chooses).
  std::optional<std::int64_t> num_microbatches;
  /// Tokens per sequence when given (training.seq_len): replaces the model's seq_len
  /// (builtin transformers and hf_config; an error for other models).
  std::optional<std::int64_t> seq_len;
};

/// A Megatron-style 3D-parallel plan: search.megatron.
struct MegatronPlanConfig {
  std::int64_t tp = 1;  ///< tensor-parallel size (inside a node)
  std::int64_t pp = 1;  ///< pipeline stages
  std::int64_t dp = 1;  ///< data-parallel replicas
  std::int64_t cp = 1;  ///< context-parallel size (sequence split; Megatron-Core --context-parallel-size)
  std::int64_t microbatch_size = 1;  ///< sequences per microbatch per replica
  std::int64_t interleave = 1;       ///< virtual stages per device (1 = plain 1F1B)
  schema::Recompute recompute = schema::Recompute::kNone;
  bool sequence_parallel = false;
  std::int64_t zero_stage = 0;  ///< 0 none, 1 optimizer states, 2 + gradients, 3 + parameters
  /// Megatron-Core's overlap flags (sim::lowering::MegatronPlan), with its defaults.
  bool tp_comm_overlap = false;
  /// --tp-comm-overlap-cfg: userbuffers settings per GEMM (TE's defaults for the roles not
  /// given); nullopt when the scenario gives none.
  std::optional<sim::lowering::TpOverlapConfig> tp_comm_overlap_cfg;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  bool overlap_p2p_comm = true;  ///< Megatron-Core's default; matters only with interleave > 1
  /// --gradient-accumulation-fusion: weight-gradient GEMMs accumulate into the fp32 main_grad
  /// (no separate accumulation kernel). Off by default here, as the scenarios written before
  /// this key priced it; Megatron-LM turns it on when its fused kernels are installed.
  bool gradient_accumulation_fusion = false;
  /// --expert-model-parallel-size / --expert-tensor-parallel-size (MoE models); etp 0 = tp.
  std::int64_t ep = 1;
  std::int64_t etp = 0;
  std::int64_t ddp_bucket_size = 0;  ///< parameters; 0: Megatron-Core's default
  std::int64_t first_stage_layers = 0;  ///< --decoder-first-pipeline-num-layers; 0: even split
  /// --pipeline-model-parallel-layout ("Et*3|(t*4|)*14t*2L"); empty: none
  /// (sim::lowering::MegatronPlan::pipeline_layout).
  std::string pipeline_layout;
  std::int64_t last_stage_layers = 0;   ///< --decoder-last-pipeline-num-layers; 0: even split
  bool account_for_embedding = false;  ///< --account-for-embedding-in-pipeline-split
  bool account_for_loss = false;       ///< --account-for-loss-in-pipeline-split
};

/// The scenario's "search" block.
struct SearchConfig {
  std::string mode;  ///< "alpa" (search) or "fixed" (evaluate the given plan)
  std::optional<MegatronPlanConfig> megatron;  ///< mode "fixed": a Megatron-style plan
  std::optional<std::filesystem::path> plan_file;  ///< mode "fixed": a plan file (docs/plan.md)
  std::string plan_file_as_written;
  double time_limit_s = 0;  ///< wall-clock budget of the whole search, baselines included
  /// Deterministic work budget: (microbatch, recompute) points the search may explore (0:
  /// no limit); "max_points" in the file.
  std::int64_t max_points = 0;
  /// Mode "alpa": also plan every baseline and print the comparison table (the baselines
  /// take most of a search's time on large clusters); off with "baselines": false or
  /// `alpa-sim --no-baselines`.
  bool compare_baselines = true;
};

/// The scenario's "profile" block: which calibration data the cost model uses.
struct ProfileRef {
  std::string preset;              ///< "auto" (the cluster preset's profile) or a preset name
  std::filesystem::path file;      ///< a profile file, when given instead of a preset
  std::string file_as_written;
};

/// A whole scenario file (format v1, docs/scenario.md).
struct Scenario {
  static constexpr int kSchemaVersion = 1;
  std::string file;  ///< as given by the user; errors name it
  std::string name;
  std::string description;
  ir::ModelConfig model;
  cluster::ClusterSpec cluster;
  TrainingConfig training;
  ProfileRef profile;
  SearchConfig search;
  core::Json what_if;   ///< reserved for `alpa-sim sweep` (null when absent)
  core::Json capacity;  ///< reserved for `alpa-sim capacity` (null when absent)
};

/// Reads and validates a scenario file. Relative paths inside resolve against its folder.
core::Result<Scenario> load_scenario(const std::filesystem::path& path);
/// Reads a scenario from text; `file` names it in errors, `base_dir` resolves paths.
core::Result<Scenario> parse_scenario(std::string_view text, const std::string& file,
                                      const std::filesystem::path& base_dir);
/// The scenario compiled into alpa-sim (scenarios/default.json), used when none is given.
core::Result<Scenario> load_default_scenario();
/// Text of the embedded default scenario.
std::string_view default_scenario_text();

/// The normalised scenario: every default filled in, so a reader sees exactly what ran.
core::Json scenario_to_json(const Scenario& scenario);

}  // namespace alpasim::driver
