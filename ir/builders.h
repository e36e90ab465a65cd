#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "ir/graph.h"
#include "ir/model_config.h"

namespace alpasim::ir {

/// Options of the forward graph that do not belong to the model itself.
struct BuildOptions {
  /// Sequences (or images) per microbatch: the batch dimension of every activation.
  std::int64_t microbatch_size = 1;
  /// Dtype of parameters and activations (mixed precision keeps fp32 masters in the
  /// optimizer, see autodiff.h).
  core::DType dtype = core::DType::kFp16;
};

/// The forward graph of a decoder transformer (builtin "gpt", "llama", "moe", "mixtral",
/// "nemotron").
/// Layers: 0 = embedding, 1..num_layers = blocks, num_layers+1 = head (final norm, LM
/// head, loss). GPT blocks follow Megatron-LM (pre-LN, GELU MLP, dropout, biases) so
/// parameter and FLOP counts equal Megatron's formulas (accounting.h); LLaMA blocks use
/// RMSNorm, rotary, grouped-query attention and SwiGLU; MoE blocks follow GShard (top-k
/// gating within groups of expert_group_size tokens, dispatch/combine einsums) with
/// experts every moe_layer_interval-th block. Precondition: the config passed
/// parse_model_config's checks (divisibility of heads).
Graph build_transformer(const TransformerConfig& config, const BuildOptions& options,
                        const std::string& name);

/// The forward graph of the Wide-ResNet of the Alpa benchmark (Flax ResNet v1 with
/// bottleneck blocks: stages 3-4-6-3 or 3-4-23-3, filters base·2^i, 3x3 conv width
/// base·2^i·width_factor, batch-norm, SAME padding). Layers: 0 = stem, 1..B = bottleneck
/// blocks, B+1 = head.
Graph build_wide_resnet(const WideResNetConfig& config, const BuildOptions& options,
                        const std::string& name);

/// Builds the forward graph of any model config: builtins directly, files through the
/// importers (graph JSON, Hugging Face config.json, ONNX). File errors come back as Status.
core::Result<Graph> build_forward_graph(const ModelConfig& config, const BuildOptions& options);

}  // namespace alpasim::ir
