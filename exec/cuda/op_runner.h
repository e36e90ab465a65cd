#pragma once

// Internal to exec/cuda/ (CUDA types allowed): the part of the CUDA backend shared by the
// virtual-device mode (cuda_backend.cc) and the one-process-per-GPU mode (nccl_rank.cc):
// buffer allocation, RUN instructions (cuBLAS, cuDNN, exec_kernels.h) and copying results
// back to the host. Never included by a public header.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "exec/backend.h"
#include "exec/instruction.h"
#include "exec/launch/rendezvous.h"
#include "exec/launch/reshard_plan.h"

namespace alpasim::exec::cuda {

using i64 = long long;

/// ok, or kInternal "<what>: <CUDA error string>" (and clears the sticky last error).
core::Status check(cudaError_t e, const std::string& what);
/// ok, or kInternal "<what>: cuBLAS status N".
core::Status check(cublasStatus_t e, const std::string& what);
/// "device 3 instruction #12 (run block0/attn/q mb1)": error context.
std::string describe(const Program& p, std::size_t device, std::size_t instruction);

/// Launches copy `c` of a resharding plan (exec/launch/reshard_plan.h) on `s`: from the
/// buffer starting at `src` to the one starting at `dst`, times `scale` (kernels::strided_copy).
core::Status launch_box_copy(const launch::BoxCopy& c, const float* src, float* dst, float scale, cudaStream_t s);

/// Device copies of host-computed index tables (einsum packing, reductions, filter
/// transposes), per (graph, key, the RUN's operand and result shapes): on sharded stages one
/// op may run on blocks of different shapes (uneven splits), and in virtual-device mode all
/// devices share the cache. Freed by free_index_cache.
using IndexCache = std::map<std::tuple<const ir::Graph*, std::int64_t, std::vector<std::int64_t>>, i64*>;
void free_index_cache(IndexCache& cache);

/// Whether this build has the cuDNN convolution path (ALPASIM_EXEC_WITH_CUDNN).
bool have_cudnn();

/// Runs the compute instructions of a program's devices on the current CUDA device. One per
/// iteration (buffers are per iteration); the handles and the index cache outlive it.
class OpRunner {
 public:
  /// `dnn` is a cudnnHandle_t, or null when the build has no cuDNN (conv ops then fail with
  /// kUnimplemented naming the op).
  OpRunner(const Program& p, cublasHandle_t blas, void* dnn, IndexCache& cache);
  ~OpRunner();
  OpRunner(const OpRunner&) = delete;
  OpRunner& operator=(const OpRunner&) = delete;

  /// Device pointer of buffer `b` (null before its ALLOCATE).
  float* ptr(BufferId b) { return ptr_[static_cast<std::size_t>(b)]; }
  const Buffer& buf(BufferId b) const { return p_.buffers[static_cast<std::size_t>(b)]; }

  /// Stream-ordered allocation of at least one fp32 element.
  core::Status alloc(float** out, i64 elements, cudaStream_t s);
  /// ALLOCATE: alloc + zero fill on `s`.
  core::Status allocate(BufferId b, cudaStream_t s);
  /// FREE on `s` (stream ordered).
  core::Status release(BufferId b, cudaStream_t s);
  /// RUN on `s`.
  core::Status run_op(const Instruction& x, cudaStream_t s);

  /// Before FREE of `b` on device index `d`: whether the backend reports it (a loss, a
  /// gradient/parameter whose owner is the stage's first device, or on a sharded stage any
  /// device's own block of a parameter or reduced gradient: the CPU backend's rule).
  /// `values` false (RunOptions::report_values): losses only.
  bool reported(std::size_t d, const Buffer& b, bool values) const;
  /// Copies `b` to the host on `s` into `losses` (kLoss) or `r`'s gradients/parameters; the
  /// copy completes when `s` does (pinned staging is not used: fp32 test-sized tensors). A
  /// block of a sharded stage (Buffer::global_shape) goes to `blocks` instead, copied
  /// before returning; launch::place_block assembles the whole tensors.
  core::Status save(const Buffer& b, ExecutionResult* r, std::map<BufferId, std::vector<float>>* losses,
                    std::vector<launch::TensorBlock>* blocks, cudaStream_t s);

 private:
  core::Status index_table(const ir::Graph& g, std::int64_t key, const std::vector<std::int64_t>& host,
                           const i64** out);
  /// The device table of (g, key, the current RUN's shapes), or nullptr before its first
  /// use: callers build a host table (millions of entries on real models, tens of ms of
  /// host time the GPU would wait for) only on a miss.
  const i64* cached_index_table(const ir::Graph& g, std::int64_t key) const;
  core::Status einsum(const ir::Graph& g, const ir::Op& op, const std::vector<float*>& in,
                      const std::vector<const Buffer*>& ib, float* out, const Buffer& ob, cudaStream_t s);
  core::Status conv(const ir::Graph& g, const ir::Op& op, const std::vector<float*>& in, float* out, cudaStream_t s);

  const Program& p_;
  cublasHandle_t blas_;
  void* dnn_;
  IndexCache& cache_;
  /// The current RUN's input and output shapes, -1 between them (part of IndexCache's key).
  std::vector<std::int64_t> shapes_;
  std::vector<float*> ptr_;
};

}  // namespace alpasim::exec::cuda
