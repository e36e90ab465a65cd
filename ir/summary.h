#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/json_reader.h"
#include "core/status.h"
#include "core/units.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "ir/graph.h"
#include "ir/model_config.h"

namespace alpasim::ir {

/// How the model is trained, for the summary: what the scenario's "training" block and
/// plan say. Every field has a unit or a closed set of values.
struct SummaryOptions {
  std::int64_t global_batch_size = 1;  ///< samples (sequences or images) per iteration
  std::int64_t microbatch_size = 1;    ///< samples per microbatch (activation accounting)
  core::DType dtype = core::DType::kFp16;
  OptimizerKind optimizer = OptimizerKind::kAdam;
  RecomputePolicy recompute = RecomputePolicy::kNone;
};

/// The model summary alpa-sim prints for every scenario: whole model, unsharded (the
/// planner divides these by the parallel degrees).
struct ModelSummary {
  std::string name;
  std::string family;             ///< "gpt", "llama", "moe", "mixtral", "wide_resnet", ...
  std::int64_t parameters = 0;    ///< trainable parameters (count)
  std::int64_t num_layers = 0;    ///< model layers incl. prologue and epilogue (Op::layer)
  std::int64_t num_ops = 0;       ///< ops of the derived training graph (one microbatch)
  std::int64_t num_forward_ops = 0;
  std::int64_t global_batch_size = 0;
  std::int64_t microbatch_size = 0;
  std::int64_t num_microbatches = 0;  ///< global_batch_size / microbatch_size
  std::string dtype;
  std::string optimizer;
  std::string recompute;
  /// Matmul FLOPs of forward + backward per iteration (Korthikanti's model FLOPs).
  core::Flops model_flops_per_iteration{0};
  /// Model FLOPs + recomputed forward matmuls (Megatron SC'21 Eq. 3 with full recompute).
  core::Flops hardware_flops_per_iteration{0};
  /// Hardware FLOPs including memory-bound ops and the optimizer update.
  core::Flops all_ops_flops_per_iteration{0};
  core::Bytes parameter_bytes{0};        ///< weights in the training dtype
  core::Bytes gradient_bytes{0};         ///< one gradient buffer, training dtype
  core::Bytes optimizer_state_bytes{0};  ///< fp32 master (16-bit training) + moments
  /// Activations kept for backward by one microbatch, summed over all layers.
  core::Bytes activation_bytes_per_microbatch{0};
  /// The largest per-layer activation footprint of one microbatch (a block for LLMs).
  core::Bytes max_layer_activation_bytes_per_microbatch{0};
  /// Per layer (Op::layer order): activation bytes kept by one microbatch.
  std::vector<std::int64_t> activation_bytes_per_layer;
};

/// Summarises a derived training graph (derive_training_graph) for a global batch.
/// Precondition (CHECKed): global_batch_size is a positive multiple of the graph's
/// samples_per_microbatch.
ModelSummary summarize_training_graph(const Graph& training_graph, std::int64_t global_batch_size);

/// Builds the model (builtin or file), derives the training step and summarises it.
/// Errors: the importers' file errors; a global batch that is not a positive multiple
/// of the microbatch size (kInvalidArgument, naming both).
core::Result<ModelSummary> summarize_model(const ModelConfig& config, const SummaryOptions& options);

/// JSON with unit-suffixed keys ("model_flops_per_iteration", "parameter_bytes", ...);
/// keys sorted, so equal summaries give byte-identical text.
core::Json summary_to_json(const ModelSummary& summary);

/// Human-readable lines, every number with its unit and what it counts, e.g.
///   "  parameters                        6.74 B (6738415616)"
///   "  model FLOPs per iteration         1.771e+16 FLOP (matmuls, forward + backward)"
std::string summary_to_text(const ModelSummary& summary);

}  // namespace alpasim::ir
