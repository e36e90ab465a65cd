#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/cpu/init_values.h"
#include "exec/instruction.h"
#include "ir/graph.h"

namespace alpasim::exec::cpu {

/// A dense tensor view (row-major). Index tensors hold their ids as exact floats.
template <class T>
struct BasicTensorView {
  T* data = nullptr;
  const std::vector<std::int64_t>* shape = nullptr;
  std::int64_t size = 0;  ///< elements
};
using TensorView = BasicTensorView<float>;      ///< the backend's fp32 tensors
using TensorViewF64 = BasicTensorView<double>;  ///< run_cpu_kernel_f64's

/// FNV-1a of a tensor's name: the seed of its initial values (exec/cpu/init_values.h).
std::uint64_t name_hash(const std::string& name);
/// How parameter `op`'s initial values are drawn, given the shape of the whole tensor (not of
/// a block of it): norm scales around 1, matrices uniform in ±1/sqrt(fan-in), others ±0.1.
init::ParameterInit parameter_init(const ir::Op& op, const std::vector<std::int64_t>& whole_shape);

/// What a kernel needs beyond its operands.
struct KernelContext {
  /// kInput: global index of the first sample of this shard (inputs are a deterministic
  /// function of the global element index, so every sharding sees the same data).
  std::int64_t sample_offset = 0;
  /// kInput with integer ids: exclusive upper bound of the ids.
  std::int64_t index_range = 0;
  /// kEmbedding: the block of table rows this device holds (exec::embedding_table_rows);
  /// rows < 0: the whole table (the operand's or output's first dimension).
  std::int64_t table_first_row = 0;
  std::int64_t table_rows = -1;
  /// A softmax cross entropy or its gradient on a block of classes (exec::LossStep): the
  /// step, the block's first class (exec::first_class_of_block) and, for kStatistics, the
  /// device's part of the statistics.
  LossStep loss_step = LossStep::kWhole;
  std::int64_t first_class = 0;
  std::int32_t loss_part = 0;
};

/// Runs `op` of graph `g` on the CPU in fp32: `inputs` in operand order (for an optimizer
/// op the last is its state), result written to `out` (overwritten; the caller adds for
/// gradient accumulation). Semantics (docs/executor.md): dropout runs with rate 0, the
/// attention softmax is causal and unscaled, norms use eps = 1e-5, batch-norm uses the
/// statistics of the shard it sees, Adam (lr 1e-3) and SGD with momentum 0.9 (lr 1e-2)
/// start from zero state, rotary embeddings turn pair (x_j, x_{j+d/2}) by
/// position · 10000^(−2j/d) (position: axis 1, which must not be split), MoE gates route
/// top-k per group in token order into `capacity` slots per expert (cpu_kernels.cc,
/// moe_route; token, expert and capacity axes must not be split), and the MoE dispatch uses
/// the gate's pattern (GShard's mask, combine > 0), the combine its weights.
/// Errors: kUnimplemented naming the op, kind and function.
core::Status run_cpu_kernel(const ir::Graph& g, const ir::Op& op,
                            const std::vector<TensorView>& inputs, TensorView out,
                            const KernelContext& ctx);

/// The same kernels (the same source, a template) in double precision, for the
/// finite-difference gradient checks (tests/unit/exec/gradient_check_test.cc): with fp64 the
/// difference quotients resolve a gradient to ~1e-8 relative instead of fp32's ~1e-3.
/// Parameters and inputs get the same values as in fp32.
core::Status run_cpu_kernel_f64(const ir::Graph& g, const ir::Op& op,
                                const std::vector<TensorViewF64>& inputs, TensorViewF64 out,
                                const KernelContext& ctx);

/// KernelContext::index_range of every op of `g` (0 where not an integer input): the table's
/// rows for the ids an embedding gathers, the classes for a cross-entropy's labels.
std::vector<std::int64_t> index_ranges(const ir::Graph& g);

/// For a reduction of shape `in` to shape `out`, the flat out index of every flat in index
/// (supported: to one element, to a suffix of `in`, NHWC -> NC); false when unsupported.
/// Shared with the CUDA backend so both reduce the same way.
bool reduction_index_map(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out,
                         std::vector<std::int64_t>& map);

/// out[b, m, n] = sum_k lhs[b, m, k] · rhs[b, k, n] for row-major operands (the blocked
/// matmul the einsum kernel reduces to); exposed for the benchmark.
void matmul(const float* lhs, const float* rhs, float* out, std::int64_t m, std::int64_t n,
            std::int64_t k);

}  // namespace alpasim::exec::cpu
