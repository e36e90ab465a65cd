#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/attention_tiles.h"
#include "core/dtype.h"
#include "ir/op.h"

namespace alpasim::ir {

/// What a model layer index stands for (Op::layer).
struct LayerInfo {
  std::string name;  ///< "embedding", "block0", ..., "head"
  std::string kind;  ///< "prologue", "transformer", "moe_transformer", "resnet_block", "epilogue"
};

/// How the graph was built; accounting needs it to scale per-microbatch numbers.
struct GraphMeta {
  std::string model_name;
  std::string family;  ///< "gpt", "llama", "moe", "mixtral", "wide_resnet", "graph_json", "onnx"
  core::DType dtype = core::DType::kFp16;  ///< activation and parameter dtype
  /// Samples (sequences or images) in one execution of the forward/backward ops: the
  /// microbatch size the graph was built for. FLOPs and activation bytes scale linearly.
  std::int64_t samples_per_microbatch = 1;
  std::int64_t seq_len = 0;  ///< tokens per sequence (0 for vision models)
  /// The scalar loss the backward pass starts from (kNoOp: inference graph).
  OpId loss = kNoOp;
  bool has_backward = false;
  bool has_optimizer = false;
  std::string optimizer;  ///< "adam" or "sgd" once derived
  std::string recompute = "none";  ///< "none", "selective" or "full" once derived
};

/// A computation graph: operators in creation order, which is a topological order
/// (an op's inputs always have smaller ids). Each op produces one tensor named by its id.
/// The add_* helpers compute output shapes, FLOPs and bytes, and CHECK their arguments
/// (a malformed graph is a bug in a builder or importer, which validate first).
class Graph {
 public:
  Graph() = default;

  GraphMeta meta;
  /// Layer descriptions indexed by Op::layer.
  std::vector<LayerInfo> layers;

  std::size_t size() const { return ops_.size(); }
  const Op& op(OpId id) const { return ops_[static_cast<std::size_t>(id)]; }
  Op& mutable_op(OpId id) { return ops_[static_cast<std::size_t>(id)]; }
  std::span<const Op> ops() const { return ops_; }
  /// Ops that read tensor `id`, in increasing id order (an op reading it twice appears twice).
  std::span<const OpId> consumers(OpId id) const { return consumers_[static_cast<std::size_t>(id)]; }

  /// Appends `op` (its id is assigned; its inputs must exist) and returns its id. FLOPs
  /// and bytes are taken as given.
  OpId add(Op op);

  // ---- Builders of typed ops. `layer` is the model layer (Op::layer). ----
  OpId add_parameter(std::string name, std::vector<std::int64_t> shape, std::int32_t layer);
  OpId add_input(std::string name, std::vector<std::int64_t> shape, bool is_index,
                 std::int32_t layer);
  /// Einsum `spec` ("bsh,hf->bsf") of lhs and rhs, plus an optional bias added to the
  /// output (its shape must be a suffix of the output shape). Kind kDot, kMoeDispatch or
  /// kMoeCombine.
  OpId add_einsum(std::string name, OpKind kind, std::string_view spec, OpId lhs, OpId rhs,
                  OpId bias, std::int32_t layer);
  OpId add_dot(std::string name, std::string_view spec, OpId lhs, OpId rhs, std::int32_t layer,
               OpId bias = kNoOp) {
    return add_einsum(std::move(name), OpKind::kDot, spec, lhs, rhs, bias, layer);
  }
  /// Forward convolution of x [n,h,w,ci] with filter [kh,kw,ci,co].
  OpId add_conv2d(std::string name, OpId x, OpId filter, std::int64_t stride, std::int32_t layer);
  /// Pointwise `function` of `inputs` (all broadcastable to `out_shape`, the first input's
  /// shape when empty), `flops_per_element` FLOPs per output element.
  OpId add_elementwise(std::string name, std::string function, std::vector<OpId> inputs,
                       std::int64_t flops_per_element, std::int32_t layer,
                       std::vector<std::int64_t> out_shape = {},
                       std::optional<core::DType> out_dtype = std::nullopt);
  /// Reduction of the inputs to `out_shape`; `flops_per_element` per element of the
  /// first input.
  OpId add_reduce(std::string name, std::string function, std::vector<OpId> inputs,
                  std::vector<std::int64_t> out_shape, std::int64_t flops_per_element,
                  std::int32_t layer, std::optional<core::DType> out_dtype = std::nullopt);
  OpId add_softmax(std::string name, OpId x, std::int32_t layer);
  /// The per-position loss [...] of `logits` [..., V] against index `labels` [...], a
  /// "softmax_cross_entropy" reduce run as `kernel` says (set_loss_kernel). Returns it.
  OpId add_softmax_cross_entropy(std::string name, OpId logits, OpId labels, LossKernel kernel,
                                 std::int32_t layer);
  /// Sets a softmax_cross_entropy reduce's kernel and the bytes it moves by it
  /// (cross_entropy_logit_traffic, plus the labels read and the loss written).
  void set_loss_kernel(OpId cross_entropy, LossKernel kernel);
  /// Normalization of x over its last axis (channels for batch-norm) with scale `gamma`
  /// and optional shift `beta` (kNoOp for RMSNorm).
  OpId add_norm(std::string name, NormType type, OpId x, OpId gamma, OpId beta,
                std::int32_t layer);
  /// Rows of `table` [rows, width] selected by integer `ids` -> ids.shape + [width].
  OpId add_embedding(std::string name, OpId table, OpId ids, std::int32_t layer);
  OpId add_max_pool(std::string name, OpId x, std::int64_t window, std::int64_t stride,
                    std::int32_t layer);
  /// Top-k gating of router probabilities [g, s, e] into combine weights [g, s, e, c].
  OpId add_moe_gate(std::string name, OpId probs, std::int64_t top_k, std::int64_t capacity,
                    std::int32_t layer);

  // ---- Graph algorithms (Boost.Graph inside graph.cc). ----
  /// A topological order computed by Boost's topological_sort (ties broken by id, so
  /// the result is deterministic). Equals 0..size-1 for graphs built by add().
  std::vector<OpId> topological_order() const;
  /// Breadth-first depth of every op: 0 for ops without inputs, else 1 + the smallest
  /// depth of its inputs (Alpa §4.2 graph simplification uses it).
  std::vector<std::int32_t> bfs_depth() const;
  /// True when `to` depends on `from` (a directed path from -> to exists; from == to is
  /// reachable).
  bool is_reachable(OpId from, OpId to) const;
  /// Every op `from` reaches, in id order.
  std::vector<OpId> reachable_from(OpId from) const;

  /// Ids of all ops of kind kParameter, in id order.
  std::vector<OpId> parameters() const;
  /// 1 + the largest Op::layer.
  std::int32_t num_layers() const;

 private:
  std::vector<Op> ops_;
  std::vector<std::vector<OpId>> consumers_;
};

/// Classifies letter `c` of `spec`.
DotDimClass dot_dim_class(const DotSpec& spec, char c);
/// Parses "ab,bc->ac"; nullopt when malformed (no "->", no comma, repeated letter in an
/// operand, or a letter in only one of the three terms).
std::optional<DotSpec> parse_dot_spec(std::string_view spec);
/// "ab,bc->ac".
std::string dot_spec_string(const DotSpec& spec);


/// True for an op a fused (Flash) attention kernel runs (Op::fused_attention): the scores,
/// their softmax and dropout, the attention x V that reads them, and the recomputed and
/// backward ops derived from them (the kernel's backward: recomputed scores, dP, dV, the
/// softmax gradient, dQ, dK). Their s x s tensors stay on chip.
bool runs_in_flash_attention(const Graph& g, const Op& op);

/// True for a tensor a flash-attention kernel keeps on chip: the s x s output of an op that
/// runs_in_flash_attention (the scores, probabilities and their dropout, forward or
/// recomputed; dP and the softmax gradient). It takes no device memory: every memory
/// account (the evaluator's liveness walks, the executor's buffers) counts it as 0 bytes,
/// though the CPU and CUDA executors, which run the kernel unfused, still store it.
bool kept_on_chip_by_flash_attention(const Graph& g, const Op& op);

/// Bytes a softmax cross entropy moves over its logits (not its labels or loss).
struct LogitTraffic {
  std::int64_t read = 0;
  std::int64_t written = 0;
};

/// What `kernel` reads and writes over `logits` values of `logit_bytes` each in its forward
/// or its backward (the gradient w.r.t. the logits). Per bf16 logit, forward + backward:
/// unfused 38 + 14, native 26 + 14, te 6 + 4 (docs/scenario.md "Loss kernel"). The unfused
/// and native kernels keep the fp32 softmax for the backward, 4 bytes per logit where the
/// graph keeps the logits (2 with bf16): that memory is not counted.
LogitTraffic cross_entropy_logit_traffic(LossKernel kernel, std::int64_t logit_bytes, std::int64_t logits,
                                         Phase phase);

/// Device memory op's whole output takes: 0 when kept_on_chip_by_flash_attention, else its
/// bytes. The one rule of every whole-tensor memory account (the evaluator's liveness walk
/// and per-layer sums, the executor's buffers); sharded blocks apply the same test.
std::int64_t device_memory_bytes(const Graph& g, const Op& op);

/// HBM bytes a memory-bound op moves (Op::bytes_read + bytes_written), except 0 for a
/// non-GEMM op inside a flash-attention kernel (its softmax, dropout and softmax gradient
/// run on chip between the kernel's GEMMs: no traffic and no kernel of their own). Every
/// pricer of memory-bound ops asks this, so a graph read back from JSON prices as built.
std::int64_t memory_traffic_bytes(const Graph& g, const Op& op);

/// memory_traffic_bytes on one device when the op's reads are split `read_shards` ways and
/// its writes `write_shards` ways (each >= 1), rounded up: a weight gradient that reads a
/// replicated input gradient into a split parameter's buffer (Megatron's vocabulary-
/// parallel embedding table: every GPU reads the whole s x b x h gradient and writes its
/// V / t rows) moves bytes_read + bytes_written / t, not either whole or both split.
std::int64_t split_memory_traffic_bytes(const Graph& g, const Op& op, std::int64_t read_shards,
                                        std::int64_t write_shards);

/// The fraction of a dot's multiply-adds its kernel performs: for a dot that runs in a
/// flash-attention kernel, whose attention is causal (the builders make decoder language
/// models), the key tiles wholly above the diagonal are skipped: with n = ceil(keys / tile)
/// tiles per row, n(n+1)/2 of n^2 are computed, (n + 1) / 2n (0.5078 at 8,192 keys).
/// With a sliding window (Op::attention_window) only the tiles in the band:
/// attention_tile_fraction. 1 for every other op. Model FLOPs still count the whole s x s
/// product (Megatron's formula), windowed or not.
double flash_attention_work_fraction(const Graph& g, const Op& op);

/// How one dot of a flash-attention kernel shares the kernels' time (core::FlashDotShare);
/// in_kernel is false for every op outside one. With selective or full recomputation
/// (GraphMeta::recompute) the forward kernel runs again before the backward one: the
/// recomputed P·V is priced in a forward kernel, and the recomputed QK^T in both (the graph
/// holds it once). Multi-head latent attention forms the scores as two dots (their no-rope
/// and rope parts, summed): one kernel, whose fixed cost and score elements the first
/// carries.
struct FlashDotRole {
  bool in_kernel = false;
  core::FlashDotShare share;
};
FlashDotRole flash_dot_role(const Graph& g, const Op& op);

// causal_tile_fraction, attention_tile_fraction and kFlashAttentionTile live in
// core/attention_tiles.h (the cost model's attention calibration applies the same rule).
using core::attention_tile_fraction;
using core::causal_tile_fraction;
using core::kFlashAttentionTile;

/// Per op id: the parameter whose gradient the op computes or sums (a weight gradient,
/// Op::grad_role kWeightGrad, on the path into that parameter's optimizer update), else
/// kNoOp. Found from the updates (a graph without an optimizer has none). Cost O(ops).
std::vector<OpId> weight_gradient_parameters(const Graph& g);

/// Per op id: 1 for a parameter a forward GEMM (einsum) or convolution reads as its weight
/// (operand 1), whose gradient accumulation across microbatches a runtime can fuse into the
/// weight-gradient kernel (cuBLAS and cuDNN accumulate into their output, beta = 1); else 0.
std::vector<char> kernel_weight_parameters(const Graph& g);

}  // namespace alpasim::ir
