#pragma once
// How an einsum (ir::DotSpec) maps onto one strided-batched GEMM call without copying its
// operands, when the operands' row-major layouts allow it. Plain C++ (no CUDA types): the
// CUDA backend turns a StridedGemm into cublasSgemmStridedBatched, and the tests run it on
// the host against a direct evaluation of the einsum.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ir/op.h"

namespace alpasim::exec {

/// One column-major, batched GEMM as BLAS takes it: for every batch entry b,
///   X_b[p x q] = op_P(P_b)[p x k] · op_Q(Q_b)[k x q],
/// element (i, j) of X_b at x + b·stride_x + i + j·ld_x. op(·) is the matrix itself
/// (`trans_* == false`: element (i, j) at i + j·ld) or its transpose (element (i, j) at
/// j + i·ld). `p_is_lhs` says which einsum operand is P (the other is Q); every offset and
/// extent is in elements.
struct StridedGemm {
  bool p_is_lhs = false;
  bool trans_p = false, trans_q = false;
  std::int64_t p = 1, q = 1, k = 1, batch = 1;
  std::int64_t ld_p = 1, ld_q = 1, ld_x = 1;
  std::int64_t stride_p = 0, stride_q = 0, stride_x = 0;
};

/// The GEMM computing `spec` on contiguous row-major operands of these shapes, or nullopt
/// when some letter class (batch, lhs-free, rhs-free, contracting) is not one arithmetic
/// progression of offsets in every operand holding it, or no operand order puts the
/// output's fastest axis first (BLAS writes column-major only). Extents and leading
/// dimensions fit in an int (the BLAS API) or the answer is nullopt.
std::optional<StridedGemm> plan_strided_gemm(const ir::DotSpec& spec, const std::vector<std::int64_t>& lhs_shape,
                                             const std::vector<std::int64_t>& rhs_shape,
                                             const std::vector<std::int64_t>& out_shape);

/// Runs `g` on host arrays with the BLAS semantics above (out is overwritten): the reference
/// the tests compare with a direct evaluation of the einsum. Every element it touches must
/// lie inside its array (a CHECK: a wrong leading dimension or stride aborts, never reads
/// past the end).
void run_strided_gemm_on_host(const StridedGemm& g, std::span<const float> lhs, std::span<const float> rhs,
                              std::span<float> out);

}  // namespace alpasim::exec
