#pragma once

// Kernels of the CUDA backend, compiled by nvcc as C++17: plain types only (STYLE.md 9.6).
// Sizes are element counts; every launch goes to `stream` and returns the launch error.
// Semantics match exec/cpu/cpu_kernels.h (fp32; causal unscaled attention softmax; eps 1e-5).

#include <cuda_runtime_api.h>

namespace alpasim::exec::cuda::kernels {

using i64 = long long;

/// dst[i] = src[index[i]] (einsum operand packing).
cudaError_t gather(float* dst, const float* src, const i64* index, i64 n, cudaStream_t stream);
/// dst[index[i]] = src[i] (einsum result unpacking).
cudaError_t scatter(float* dst, const float* src, const i64* index, i64 n, cudaStream_t stream);
/// Most axes of a strided_copy (exec/launch/reshard_plan.h kMaxCopyAxes).
constexpr int kMaxBoxAxes = 8;
/// A strided box (exec/launch/reshard_plan.h BoxCopy without offsets: the caller offsets the
/// pointers): element (i_0, ..., i_{axes-1}) goes from src[Σ i_a·src_stride[a]] to
/// dst[Σ i_a·dst_stride[a]], 0 <= i_a < extent[a].
struct StridedBox {
  int axes = 0;
  i64 extent[kMaxBoxAxes] = {};
  i64 src_stride[kMaxBoxAxes] = {};
  i64 dst_stride[kMaxBoxAxes] = {};
};
/// dst[...] = scale · src[...] over `box` (resharding copies, their packing and unpacking).
/// The destination elements of one box are distinct, so threads never race.
cudaError_t strided_copy(float* dst, const float* src, const StridedBox& box, float scale, cudaStream_t stream);
/// Where the elements of a block of a tensor sit in the whole tensor: element i of the block
/// (row-major over `shape`) is the whole tensor's element Σ (x_a + offset[a])·whole_stride[a],
/// x the block coordinates of i. axes == 0: the block is the whole tensor (element i is i).
struct InitBlock {
  int axes = 0;
  i64 shape[kMaxBoxAxes] = {};
  i64 offset[kMaxBoxAxes] = {};
  i64 whole_stride[kMaxBoxAxes] = {};
};
/// dst[i] = exec::init::parameter_value({seed, base, scale}, whole index of i): a
/// parameter's initial values, bit-identical to the CPU backend's (exec/cpu/init_values.h).
cudaError_t init_parameter(float* dst, i64 n, unsigned long long seed, float base, float scale,
                           const InitBlock& block, cudaStream_t stream);
/// dst[i] = exec::init::input_value(seed, first_index + i, is_index, index_range): a
/// synthetic input's values, bit-identical to the CPU backend's.
cudaError_t init_input(float* dst, i64 n, unsigned long long seed, i64 first_index, int is_index,
                       i64 index_range, cudaStream_t stream);
/// dst[i] = value.
cudaError_t fill(float* dst, float value, i64 n, cudaStream_t stream);
/// dst[i] = alpha · dst[i] + beta · src[i % src_n] (bias add, accumulation, scaling).
cudaError_t axpby(float* dst, float alpha, const float* src, float beta, i64 n, i64 src_n,
                  cudaStream_t stream);
/// Pointwise function `fn` of a (and b, each indexed modulo its size):
/// 0 add, 1 mul, 2 gelu(a), 3 a·gelu'(b), 4 relu(a), 5 a·[b > 0], 6 relu(a)^2, 7 a·2·relu(b).
cudaError_t pointwise(int fn, float* out, const float* a, i64 a_n, const float* b, i64 b_n, i64 n,
                      cudaStream_t stream);
/// out[j] = f · Σ_{i: map[i] = j} in[i], j < out_n, summed in double (the CPU backend's
/// reductions): sums and means.
cudaError_t reduce_map(float* out, const float* in, const i64* map, double f, i64 n, i64 out_n, cudaStream_t stream);
/// out[i] = f · in[map[i]]: gradient of a reduction.
cudaError_t broadcast_map(float* out, const float* in, const i64* map, float f, i64 n, cudaStream_t stream);
/// Row softmax; causal > 0: row r sees the first (r mod causal) + 1 entries, and with
/// window > 0 (a sliding-window attention, ir::Op::attention_window) only the last
/// `window` of them.
cudaError_t softmax(float* y, const float* x, i64 rows, i64 width, i64 causal, i64 window, cudaStream_t stream);
/// dx = y · (dy − Σ dy·y) per row.
cudaError_t softmax_grad(float* dx, const float* dy, const float* y, i64 rows, i64 width, cudaStream_t stream);
/// Layer norm (rms != 0: RMS norm) over rows: y = xhat·gamma + beta (beta may be null).
cudaError_t layer_norm(float* y, const float* x, const float* gamma, const float* beta, i64 rows, i64 width,
                       int rms, cudaStream_t stream);
/// dx of layer/RMS norm.
cudaError_t layer_norm_grad(float* dx, const float* dy, const float* x, const float* gamma, i64 rows,
                            i64 width, int rms, cudaStream_t stream);
/// dgamma[c] = Σ_rows dy·xhat (layer/RMS norm).
cudaError_t layer_norm_scale_grad(float* dgamma, const float* dy, const float* x, i64 rows, i64 width,
                                  int rms, cudaStream_t stream);
/// Batch norm over NHWC data seen as [rows, width] (width = channels): per channel c,
/// statistics over the rows (batch statistics, biased variance, eps 1e-5);
/// y = xhat·gamma[c] + beta[c] (beta may be null).
cudaError_t batch_norm(float* y, const float* x, const float* gamma, const float* beta, i64 rows, i64 width,
                       cudaStream_t stream);
/// dx of batch norm: per channel, inv_std · (d − mean(d) − xhat · mean(d · xhat)), d = dy · gamma[c].
cudaError_t batch_norm_grad(float* dx, const float* dy, const float* x, const float* gamma, i64 rows, i64 width,
                            cudaStream_t stream);
/// dgamma[c] = Σ_rows dy · xhat (batch norm).
cudaError_t batch_norm_scale_grad(float* dgamma, const float* dy, const float* x, i64 rows, i64 width,
                                  cudaStream_t stream);
/// Max pooling of NHWC x [n, h, w, c] with a window×window kernel, `stride`, SAME padding
/// (pad_top/pad_left before) into y [n, ho, wo, c]; ties go to the first position in
/// row-major window order (as the CPU backend).
cudaError_t max_pool(float* y, const float* x, i64 n, i64 h, i64 w, i64 c, i64 window, i64 stride, i64 pad_top,
                     i64 pad_left, i64 ho, i64 wo, cudaStream_t stream);
/// dx[argmax] += dy (dx zeroed by the caller).
cudaError_t max_pool_grad(float* dx, const float* dy, const float* x, i64 n, i64 h, i64 w, i64 c, i64 window,
                          i64 stride, i64 pad_top, i64 pad_left, i64 ho, i64 wo, cudaStream_t stream);
/// Per row: log Σ exp(x) − x[label].
cudaError_t cross_entropy(float* out, const float* logits, const float* labels, i64 rows, i64 width,
                          cudaStream_t stream);
/// Per row: dy[r] · (softmax(x) − onehot(label)).
cudaError_t cross_entropy_grad(float* dx, const float* dy, const float* logits, const float* labels, i64 rows,
                               i64 width, cudaStream_t stream);
/// A cross entropy on a block of classes (exec::LossStep): per row of the block
/// [rows, width] whose first class is `first_class`, its log-sum-exp and the label's logit
/// (0 when the label is another block's), written to part[2r] and part[2r + 1].
cudaError_t cross_entropy_block_statistics(float* part, const float* logits, const float* labels, i64 rows,
                                           i64 width, i64 first_class, cudaStream_t stream);
/// Per row: log Σ_p exp(lse_p) − Σ_p label_p of gathered statistics [parts, rows, 2].
cudaError_t cross_entropy_combine(float* out, const float* statistics, i64 parts, i64 rows, cudaStream_t stream);
/// Per row of a block of classes: dy[r] · (exp(x − lse) − onehot(label − first_class)), lse
/// combined from the gathered statistics [parts, rows, 2].
cudaError_t cross_entropy_block_grad(float* dx, const float* dy, const float* logits, const float* labels,
                                     const float* statistics, i64 parts, i64 rows, i64 width, i64 first_class,
                                     cudaStream_t stream);
/// out[r, :] = table[ids[r] - first_row, :] for ids in [first_row, first_row + table_rows),
/// zeros for other ids (a vocabulary-split table's block: exec::embedding_table_rows).
cudaError_t embedding(float* out, const float* table, const float* ids, i64 rows, i64 width, i64 first_row,
                      i64 table_rows, cudaStream_t stream);
/// grad[ids[r] - first_row, :] += dy[r, :] for ids in that block (grad zeroed by the caller).
cudaError_t embedding_grad(float* grad, const float* dy, const float* ids, i64 rows, i64 width, i64 first_row,
                           i64 table_rows, cudaStream_t stream);
/// Adam (step 1 from zero state, as the CPU backend) or SGD with momentum.
cudaError_t adam(float* w, const float* g, float* state, i64 n, cudaStream_t stream);
cudaError_t sgd_momentum(float* w, const float* g, float* state, i64 n, cudaStream_t stream);

}  // namespace alpasim::exec::cuda::kernels
