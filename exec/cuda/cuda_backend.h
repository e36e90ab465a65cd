#pragma once

#include <memory>

#include "core/status.h"
#include "exec/backend.h"

namespace alpasim::exec::cuda {

/// The CUDA backend. Its run() is run_cuda (run_cuda.h) with the mode "auto", or the one in
/// the environment variable ALPASIM_EXEC_CUDA_MODE (auto | virtual | processes):
/// - virtual devices (one GPU): every logical device of the program runs on GPU 0 of this
///   process with its own stream and buffers (stream-ordered cudaMallocAsync); SEND/RECV are
///   device-to-device copies through a staging buffer ordered by events, collectives are
///   copies and sum kernels on the first member's stream after waiting on every member;
/// - one process per GPU (enough GPUs, or under mpirun): NCCL communicators per collective
///   group and per direction of each device pair, non-blocking with async-error polling
///   and abort on error or timeout (nccl_rank.cc), launched by the built-in launcher.
/// Matmuls (any einsum: operands packed to [batch, M, K] x [batch, K, N]) go through
/// cublasSgemmStridedBatched; convolutions (forward, data and filter gradient) through cuDNN
/// when the build found it; elementwise, softmax, layer/RMS norm, cross-entropy, embedding,
/// batch-norm, max-pool and optimizer ops are CUDA kernels (exec_kernels.h); a CUDA event
/// pair brackets every instruction. Ops or instructions without a GPU path fail with
/// kUnimplemented naming them.
/// kUnavailable when no GPU is usable. NOT YET RUN ON A GPU: exec/cuda/README.md.
core::Result<std::unique_ptr<Backend>> make_cuda_backend();

}  // namespace alpasim::exec::cuda
