#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace alpasim::planner::intra_op {

/// Operator kinds the intra-op pass knows strategies for (strategies.h). Dot, batched matmul,
/// conv2d (as its loop nest: batch, out-channel, in-channel, spatial) and the embedding
/// lookup (a one-hot contraction over the vocabulary) are all kEinsum.
enum class OpKind {
  kInput,        ///< a batch input (tokens, images, labels): any layout, no cost
  kParameter,    ///< a weight: any layout; memory = its tile
  kEinsum,       ///< a loop nest sum_k prod operands (Alpa Table 3 generalised)
  kElementwise,  ///< elementwise and layout ops (transpose, reshape, broadcast): follow operands
  kReduce,       ///< a sum over some axes of its one operand
  kSoftmax,      ///< softmax along `norm_axis`; split there costs an all-reduce of row stats
  kLayerNorm,    ///< layer-norm along `norm_axis`; same rule as softmax
  kMoeDispatch,  ///< einsum "gsec,gsm->egcm" plus expert-parallel all-to-all strategies
  kMoeCombine,   ///< einsum "egcm,gsec->gsm" plus expert-parallel all-to-all strategies
  kUpdate,       ///< optimizer update of operand 0 (weight) by operand 1 (gradient)
};

/// "input", "parameter", "einsum", ...
const char* op_kind_name(OpKind kind);

struct IntraOpNode;
/// Whether the loops of a kMoeDispatch / kMoeCombine node have GShard's structure (any loop
/// ids, letters as in the builder's equations): dispatch "gsec,gsm->egcm"; combine
/// "egcm,gsec->gsm" or "gsec,egcm->gsm" (the IR's order). The expert-parallel strategies
/// rely on it; the IR adapter keeps other MoE spellings as plain einsums.
bool has_moe_structure(const IntraOpNode& node);

/// One operator of the graph the intra-op pass plans: the pass's own input description, so
/// it does not depend on the model-graph IR (the IR adapter fills it). All fields use the
/// operator's output shape unless said otherwise.
struct IntraOpNode {
  std::string name;
  OpKind kind = OpKind::kElementwise;
  std::vector<int> operands;          ///< indices of earlier nodes
  std::vector<std::int64_t> shape;    ///< output dims, elements
  std::int64_t element_bytes = 2;     ///< bytes of one output element (fp16: 2)

  /// kEinsum / kMoe*: loop id of every axis of every operand and of the output. A loop that
  /// is absent from the output is a contraction (split: partial sums, all-reduce).
  std::vector<std::vector<int>> operand_loops;
  std::vector<int> output_loops;
  /// kEinsum, optional: the iteration count of every loop (index = loop id). When set, a
  /// tensor axis may carry a loop with a different size and a loop may appear in the output
  /// only: a convolution's spatial loop spans the output rows while a strided input has
  /// `stride` times as many, and a filter gradient's kernel loops appear in its output only.
  /// A split of such a loop must divide its extent and every axis carrying it evenly.
  std::vector<std::int64_t> loop_extents;
  /// kEinsum, optional: loops that may be split over a mesh axis (index = loop id; empty:
  /// all). A convolution keeps the spatial loops of a window larger than 1x1 whole (a split
  /// would need a halo exchange, which is not priced) and its kernel-tap loops whole.
  std::vector<bool> loop_splittable;

  /// kElementwise / kSoftmax / kLayerNorm / kUpdate: for every axis of every operand the
  /// output axis it is aligned with, or -1 for an axis that must stay replicated (the minor
  /// half of a reshape, say). An output axis missing from an operand is a broadcast.
  std::vector<std::vector<int>> operand_axis_map;
  /// Output axes that may be split (empty: all). False for the minor axes of a reshape.
  std::vector<bool> splittable;

  std::vector<int> reduce_axes;  ///< kReduce: summed axes of the operand
  int norm_axis = -1;            ///< kSoftmax / kLayerNorm: the normalised output axis

  /// kUpdate: optimizer-state bytes per weight element (mixed-precision Adam: fp32 master,
  /// momentum and variance = 12). Replaces the output in the memory count (in-place update).
  std::int64_t state_bytes_per_element = 0;

  /// Peak FLOPs of one execution of the unsharded operator (einsum: 2 · prod(loop sizes));
  /// 0 lets the pass derive it for einsums and ignore it for everything else.
  double flops = 0.0;

  /// kElementwise / kSoftmax / kLayerNorm / kReduce and gathers: bytes the unsharded operator
  /// reads and writes as one memory-bound kernel; 0 leaves its compute out
  /// (CostHooks::memory_bound).
  std::int64_t bytes_accessed = 0;

  /// The pass running the operator (0 forward, 1 backward or recomputation, 2 optimizer):
  /// users of one tensor in one pass that read it in the same layout share one resharding
  /// copy (a runtime gathers the sequence-parallel input of Q, K and V once); another pass
  /// makes its own (Megatron gathers it again in the backward). In structural_key: the
  /// charged costs depend on it.
  int pass = 0;

  /// kElementwise: the output is the sum of the operands (a gradient accumulation, a
  /// residual add). All-reduces of partial sums that only this sum reads are then one
  /// all-reduce of the sum (the intra-op pass's charged costs; in structural_key).
  bool sums_operands = false;

  /// kEinsum: an embedding lookup written as a one-hot contraction (a gather). It is
  /// memory-bound (bytes_accessed), not a heavy operator: its replicated strategy is kept
  /// (Megatron replicates the position lookup) and pays its bytes, and no FLOPs are charged
  /// for the one-hot product it never computes. In structural_key.
  bool gather = false;

  /// The training loss: reported, read by no operator (the backward starts from a seed of
  /// ones). Its partial sums over the replicas are not all-reduced per microbatch; a runtime
  /// averages one scalar per iteration for logging (Megatron's
  /// average_losses_across_data_parallel_group). In structural_key.
  bool result_unread = false;

  /// ir::Op::attention_window of the operator (a fused attention op of a sliding-window
  /// layer; 0 otherwise). The pass prices it through its compute hook; it is here so that
  /// a sliding-window layer and a full-attention layer of the same shapes are different
  /// structural classes (priced apart by the search). In structural_key.
  std::int64_t attention_window = 0;
};

/// A DAG of operators in topological order (operands before users).
struct IntraOpGraph {
  std::vector<IntraOpNode> nodes;

  /// Checks indices, shapes and loop maps; the message names the node, e.g.
  /// "node 4 (\"fc1\"): operand 1 axis 0 has loop 2 of size 512, but that loop is 1024".
  core::Status validate() const;
  /// Sizes of the loops of einsum-like node `v` (index = loop id): its loop_extents when
  /// set, else the sizes of the axes carrying each loop. Requires validate().
  std::vector<std::int64_t> loop_sizes(int v) const;
  /// A canonical text of everything that affects planning (kinds, shapes, dtypes, operand
  /// structure, maps; not names): equal keys plan identically.
  std::string structural_key() const;
  /// 64-bit FNV-1a hash of structural_key().
  std::uint64_t structural_hash() const;
};

/// Which convolution of a training step a conv node computes.
enum class ConvPass {
  kForward,         ///< x [n,h,w,ci] · f [kh,kw,ci,co] -> y [n,ho,wo,co]
  kDataGradient,    ///< dy [n,ho,wo,co] · f -> dx [n,h,w,ci]
  kFilterGradient,  ///< x · dy -> df [kh,kw,ci,co]
};

/// A 2-D convolution, NHWC activations and HWIO filters, "same" padding: ho = ceil(h/stride).
struct ConvDims {
  std::int64_t n = 1, h = 1, w = 1, ci = 1, co = 1, kh = 1, kw = 1, stride = 1;
  std::int64_t out_h() const { return (h + stride - 1) / stride; }
  std::int64_t out_w() const { return (w + stride - 1) / stride; }
  /// 2 · n·ho·wo · co · kh·kw·ci: every pass does the same multiply-adds.
  double flops() const;
};

/// The kEinsum node of one convolution pass (operands `a`, `b` in the order of ConvPass's
/// comments): loops n 0, ho 1, wo 2, ci 3, kh 4, kw 5, co 6 with loop_extents; the spatial
/// loops span the output and also index the input (stride times as many rows), so a split
/// splits both; they are splittable for 1x1 kernels only (a wider window needs a halo
/// exchange, not priced), the kernel-tap loops never. Forward contracts ci, kh, kw; the data
/// gradient co, kh, kw; the filter gradient n, ho, wo. Output element size `element_bytes`.
IntraOpNode conv_node(std::string name, ConvPass pass, const ConvDims& dims, int a, int b,
                      std::int64_t element_bytes);

/// Builds IntraOpGraphs with shape inference and einsum notation.
class GraphBuilder {
 public:
  int input(std::string name, std::vector<std::int64_t> shape, std::int64_t element_bytes = 2);
  int parameter(std::string name, std::vector<std::int64_t> shape,
                std::int64_t element_bytes = 2);
  /// `equation` in einsum notation over single-letter loops, e.g. "bsh,hf->bsf" (matmul),
  /// "bhqd,bhkd->bhqk" (attention scores), "nchw,ocrs->nohw" (conv2d without spatial
  /// windows: its spatial and kernel loops are never split). CHECKs the notation.
  /// `element_bytes` of the output; 0 takes operand 0's (pass the table's for an embedding
  /// whose operand 0 holds int32 ids).
  int einsum(std::string name, std::string_view equation, std::vector<int> operands,
             std::int64_t element_bytes = 0);
  /// Elementwise op of operands aligned at their trailing axes (numpy broadcasting).
  int elementwise(std::string name, std::vector<int> operands);
  /// Transpose: output axis i is operand axis perm[i].
  int transpose(std::string name, int operand, std::vector<int> perm);
  /// Reshape described axis by axis: output axis i takes its split from operand axis
  /// source[i] (the major part of a split axis) or cannot be split (-1).
  int reshape(std::string name, int operand, std::vector<std::int64_t> shape,
              std::vector<int> source);
  int reduce(std::string name, int operand, std::vector<int> axes);
  int softmax(std::string name, int operand, int axis);
  int layer_norm(std::string name, int operand, int axis);
  /// A convolution pass (conv_node); CHECKs the operand shapes against `dims`.
  int conv2d(std::string name, ConvPass pass, const ConvDims& dims, int a, int b);
  int moe_dispatch(std::string name, int combine_weights, int tokens);
  int moe_combine(std::string name, int expert_out, int combine_weights);
  /// Optimizer update of weight `weight` by gradient `grad` (same shape).
  int update(std::string name, int weight, int grad, std::int64_t state_bytes_per_element = 12);

  const IntraOpGraph& graph() const { return graph_; }
  IntraOpGraph take() { return std::move(graph_); }
  const std::vector<std::int64_t>& shape(int v) const;

 private:
  int add(IntraOpNode node);
  IntraOpGraph graph_;
};

}  // namespace alpasim::planner::intra_op
