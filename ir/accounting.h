#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/units.h"
#include "ir/autodiff.h"
#include "ir/graph.h"

namespace alpasim::ir {

/// Trainable parameters: the sum of the element counts of all kParameter ops.
std::int64_t parameter_count(const Graph& graph);

/// FLOPs of one execution of each phase of a graph (one microbatch for forward,
/// recompute and backward; one update for the optimizer). `matmul_*` count dots and
/// convolutions only (Op::is_model_matmul), the quantity Megatron's and Korthikanti's
/// formulas count; `total_*` add every other op (MoE dispatch/combine included). Exact
/// integers.
struct PhaseFlops {
  std::int64_t matmul_forward = 0;
  std::int64_t matmul_recompute = 0;
  std::int64_t matmul_backward = 0;
  std::int64_t total_forward = 0;
  std::int64_t total_recompute = 0;
  std::int64_t total_backward = 0;
  std::int64_t total_optimizer = 0;
};
PhaseFlops phase_flops(const Graph& graph);

/// FLOPs of one training iteration over `global_batch_size` samples
/// (= global_batch_size / samples_per_microbatch executions of forward/backward).
struct IterationFlops {
  /// Model FLOPs (Korthikanti et al.): matmul FLOPs of forward + backward, without
  /// recomputation. The basis of MFU.
  core::Flops model{0};
  /// Hardware FLOPs: model FLOPs + the recomputed forward matmuls (Megatron SC'21 Eq. 3
  /// with full recomputation; Korthikanti Eq. 8 with selective).
  core::Flops hardware{0};
  /// Hardware FLOPs including the memory-bound ops (norms, softmax, pointwise) and the
  /// optimizer update.
  core::Flops hardware_all_ops{0};
};
/// Precondition: the graph has a backward pass and global_batch_size is a positive
/// multiple of graph.meta.samples_per_microbatch (CHECKed).
IterationFlops flops_per_iteration(const Graph& training_graph, std::int64_t global_batch_size);

/// Bytes of forward activations each model layer keeps for the backward pass of one
/// microbatch: the outputs of forward ops (inputs included, parameters excluded) read by
/// a backward or recompute op, attributed to the producer's layer. Indexed by Op::layer.
std::vector<std::int64_t> activation_bytes_per_layer(const Graph& training_graph);

/// Per-layer totals of a training graph (one microbatch; optimizer once): what the
/// simulator and the inter-op pass need to cost a stage made of whole layers.
struct LayerStats {
  std::string name;  ///< GraphMeta layers[i].name ("block3")
  std::string kind;  ///< "prologue", "transformer", "moe_transformer", "resnet_block", ...
  std::int64_t parameters = 0;
  std::int64_t num_forward_ops = 0;
  PhaseFlops flops;  ///< of this layer's ops only
  std::int64_t forward_bytes_accessed = 0;   ///< Σ bytes read + written by forward ops
  std::int64_t backward_bytes_accessed = 0;  ///< same for backward and recompute ops
  /// Activations kept for backward by one microbatch (activation_bytes_per_layer).
  std::int64_t activation_bytes = 0;
  /// Bytes of forward tensors this layer produces that later layers read: what a
  /// pipeline stage boundary after this layer sends per microbatch (and, as gradients,
  /// receives back).
  std::int64_t boundary_bytes = 0;
};
/// Indexed by Op::layer. Precondition: a derived training graph (or a forward graph:
/// backward fields stay 0).
std::vector<LayerStats> layer_stats(const Graph& graph);

/// Persistent training state (whole model, unsharded).
struct StateBytes {
  core::Bytes parameters{0};        ///< parameters in the training dtype
  core::Bytes gradients{0};         ///< one gradient buffer in the training dtype
  core::Bytes optimizer_states{0};  ///< fp32 master copy (16-bit training) + moments
};
StateBytes training_state_bytes(std::int64_t parameters, core::DType dtype, OptimizerKind opt);

// ---- Published closed forms (validation/data/README.md) ----

/// Megatron-LM SC'21 Eq. 2: P = 12·l·h² + 13·l·h + (V + s)·h (the paper writes it as
/// 12lh²(1 + 13/(12h) + (V+s)/(12lh))). The GPT builder has exactly 2h more: the final
/// layer-norm, which Eq. 2 leaves out.
std::int64_t megatron_eq2_parameters(std::int64_t l, std::int64_t h, std::int64_t V,
                                     std::int64_t s);
/// Megatron-LM SC'21 Eq. 3 for one sequence (B = 1), full recomputation:
/// 96·s·l·h² + 16·s²·l·h + 6·s·h·V (= 96Bslh²(1 + s/(6h) + V/(16lh)) / B). Exact.
std::int64_t megatron_eq3_flops_per_sequence(std::int64_t s, std::int64_t l, std::int64_t h,
                                             std::int64_t V);
/// Korthikanti et al. 2022 Eq. 7 (model FLOPs) for one sequence:
/// 72·s·L·h² + 12·s²·L·h + 6·s·h·V.
std::int64_t korthikanti_eq7_model_flops_per_sequence(std::int64_t s, std::int64_t L,
                                                      std::int64_t h, std::int64_t V);
/// Korthikanti et al. 2022 Eq. 8 (hardware FLOPs, selective recompute) for one sequence:
/// 72·s·L·h² + 24·s²·L·h + 6·s·h·V.
std::int64_t korthikanti_eq8_hardware_flops_per_sequence(std::int64_t s, std::int64_t L,
                                                         std::int64_t h, std::int64_t V);
/// Korthikanti et al. 2022 Table 2: activation bytes per transformer layer and
/// microbatch, 16-bit activations, tensor-parallel size t, with/without sequence
/// parallelism: none: sbh(10 + 24/t + 5as/(ht)) [= 34sbh + 5as²b at t = 1];
/// selective: sbh(10 + 24/t) (or 34sbh/t with sequence parallelism); full: 2sbh
/// (the layer input; /t with sequence parallelism). Rounded down to whole bytes.
std::int64_t korthikanti_activation_bytes_per_layer(std::int64_t s, std::int64_t b,
                                                    std::int64_t h, std::int64_t a,
                                                    std::int64_t t, bool sequence_parallel,
                                                    RecomputePolicy recompute);

}  // namespace alpasim::ir
