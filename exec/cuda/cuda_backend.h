#pragma once

#include <memory>

#include "core/status.h"
#include "exec/backend.h"

namespace alpasim::exec::cuda {

/// The CUDA backend in virtual-device mode: every logical device of the program runs on one
/// GPU (device 0 of this process) with its own stream and buffers (stream-ordered
/// cudaMallocAsync); SEND/RECV are device-to-device copies through a staging buffer ordered
/// by events, collectives are copies and sum kernels on the first member's stream after
/// waiting on every member. Matmuls (any einsum: operands packed to [batch, M, K] x
/// [batch, K, N]) go through cublasSgemmStridedBatched; elementwise, softmax, layer/RMS
/// norm, cross-entropy, embedding and optimizer ops are CUDA kernels (exec_kernels.h); a
/// CUDA event pair brackets every instruction. Convolution, pooling and batch-norm have no
/// GPU path yet (kUnimplemented naming the op). kUnavailable when no GPU is usable.
core::Result<std::unique_ptr<Backend>> make_cuda_backend();

}  // namespace alpasim::exec::cuda
