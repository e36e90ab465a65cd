#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "exec/cuda/microbench/bench_kernels.h"
#include "exec/cuda/microbench/benches.h"
#include "exec/cuda/microbench/progress.h"

namespace alpasim::exec::microbench {
namespace {

core::Status lt_status(cublasStatus_t s, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return core::Status();
  return core::internal_error(what + ": cuBLASLt status " + std::to_string(static_cast<int>(s)));
}
#define LT_TRY(expr, what) ALPASIM_RETURN_IF_ERROR(lt_status((expr), (what)))

struct Types {
  cudaDataType_t ab, cd;
  cublasComputeType_t compute;
  int ab_bytes, cd_bytes;
};

Types types_of(core::DType d) {
  switch (d) {
    case core::DType::kFp32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, 4};
    case core::DType::kTf32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4};
    case core::DType::kFp16: return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 2};
    case core::DType::kBf16: return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 2};
    case core::DType::kFp8: return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 2};
  }
  return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 4, 4};
}

// Masks for kernels::fill_pattern giving finite values of magnitude 0.1 .. 1 with a random
// sign: exponent bits fixed just below the bias, low mantissa bits random.
void fill_masks(int elem_bytes, cudaDataType_t t, std::uint32_t& keep, std::uint32_t& set) {
  if (elem_bytes == 4) {  // fp32: sign | 0x3D800000..0x3F7FFFFF
    keep = 0x80FFFFFFu;
    set = 0x3E000000u;
  } else if (t == CUDA_R_16F) {
    keep = 0x83FFu;
    set = 0x3400u;
  } else if (elem_bytes == 2) {  // bf16
    keep = 0x807Fu;
    set = 0x3E00u;
  } else {  // fp8 e4m3: sign | exponent 0101 | 3 mantissa bits
    keep = 0x87u;
    set = 0x28u;
  }
}

struct Deleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};

}  // namespace

core::Result<std::vector<schema::GemmEntry>> run_gemm_cases(const std::vector<GemmCase>& cases,
                                                            const BenchContext& ctx) {
  ALPASIM_CUDA_TRY(cudaSetDevice(ctx.device), "cudaSetDevice");
  cublasLtHandle_t handle = nullptr;
  LT_TRY(cublasLtCreate(&handle), "cublasLtCreate");
  std::unique_ptr<cublasLtContext, decltype(&cublasLtDestroy)> handle_owner(handle, cublasLtDestroy);
  cudaStream_t stream = nullptr;
  ALPASIM_CUDA_TRY(cudaStreamCreate(&stream), "cudaStreamCreate");
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream_owner(stream, cudaStreamDestroy);

  // One pool per operand, sized for the largest case, refilled when the dtype changes.
  std::size_t max_a = 0, max_b = 0, max_c = 0;
  for (const auto& c : cases) {
    const Types t = types_of(c.dtype);
    const auto b = static_cast<std::size_t>(c.batch);
    max_a = std::max(max_a, b * static_cast<std::size_t>(c.m * c.k) * static_cast<std::size_t>(t.ab_bytes));
    max_b = std::max(max_b, b * static_cast<std::size_t>(c.k * c.n) * static_cast<std::size_t>(t.ab_bytes));
    max_c = std::max(max_c, b * static_cast<std::size_t>(c.m * c.n) * static_cast<std::size_t>(t.cd_bytes));
  }
  constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // cuBLAS guidance for Hopper
  DeviceBuffer a, b, c, ws;
  ALPASIM_RETURN_IF_ERROR(a.allocate(max_a, "GEMM A"));
  ALPASIM_RETURN_IF_ERROR(b.allocate(max_b, "GEMM B"));
  ALPASIM_RETURN_IF_ERROR(c.allocate(max_c, "GEMM C"));
  ALPASIM_RETURN_IF_ERROR(ws.allocate(kWorkspaceBytes, "cuBLASLt workspace"));

  std::vector<schema::GemmEntry> out;
  Progress bar("gemm", static_cast<std::int64_t>(cases.size()), ctx.progress);
  std::optional<core::DType> filled;
  for (const auto& gc : cases) {
    const Types t = types_of(gc.dtype);
    if (filled != gc.dtype) {
      std::uint32_t keep = 0, set = 0;
      fill_masks(t.ab_bytes, t.ab, keep, set);
      ALPASIM_CUDA_TRY(kernels::fill_pattern(a.get(), max_a / static_cast<std::size_t>(t.ab_bytes) *
                                                          static_cast<std::size_t>(t.ab_bytes),
                                             t.ab_bytes, keep, set, 1, stream), "fill A");
      ALPASIM_CUDA_TRY(kernels::fill_pattern(b.get(), max_b / static_cast<std::size_t>(t.ab_bytes) *
                                                          static_cast<std::size_t>(t.ab_bytes),
                                             t.ab_bytes, keep, set, 2, stream), "fill B");
      filled = gc.dtype;
    }
    cublasLtMatmulDesc_t op = nullptr;
    LT_TRY(cublasLtMatmulDescCreate(&op, t.compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    std::unique_ptr<cublasLtMatmulDescOpaque_t, Deleter> op_owner(op);
    // TN: C (m x n, column-major) = A^T B with A stored k x m; the layout fp8 requires and a
    // fast path for every other dtype.
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa), "TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb), "TRANSB");
    auto layout = [&](cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                      cublasLtMatrixLayout_t& l) -> core::Status {
      LT_TRY(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(rows),
                                        static_cast<std::uint64_t>(cols), rows), "layout");
      if (gc.batch > 1) {
        const int count = static_cast<int>(gc.batch);
        const std::int64_t stride = rows * cols;
        LT_TRY(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), "batch");
        LT_TRY(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), "stride");
      }
      return core::Status();
    };
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    ALPASIM_RETURN_IF_ERROR(layout(t.ab, gc.k, gc.m, la));
    std::unique_ptr<cublasLtMatrixLayoutOpaque_t, Deleter> la_owner(la);
    ALPASIM_RETURN_IF_ERROR(layout(t.ab, gc.k, gc.n, lb));
    std::unique_ptr<cublasLtMatrixLayoutOpaque_t, Deleter> lb_owner(lb);
    ALPASIM_RETURN_IF_ERROR(layout(t.cd, gc.m, gc.n, lc));
    std::unique_ptr<cublasLtMatrixLayoutOpaque_t, Deleter> lc_owner(lc);
    cublasLtMatmulPreference_t pref = nullptr;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "preference");
    std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, Deleter> pref_owner(pref);
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &kWorkspaceBytes, sizeof kWorkspaceBytes), "workspace");
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, lc, lc, pref, 1, &heur, &found),
           "cublasLtMatmulAlgoGetHeuristic");
    const std::string what = std::string(core::dtype_name(gc.dtype)) + " " + std::to_string(gc.m) +
                             "x" + std::to_string(gc.n) + "x" + std::to_string(gc.k) +
                             (gc.batch > 1 ? " x" + std::to_string(gc.batch) : "");
    if (found == 0) {
      return core::internal_error("cuBLASLt has no algorithm for GEMM " + what);
    }
    const float alpha = 1.0f, beta = 0.0f;
    auto launch = [&]() -> core::Status {
      return lt_status(cublasLtMatmul(handle, op, &alpha, a.get(), la, b.get(), lb, &beta, c.get(),
                                      lc, c.get(), lc, &heur.algo, ws.get(), kWorkspaceBytes, stream),
                       "cublasLtMatmul " + what);
    };
    ALPASIM_ASSIGN_OR_RETURN(double secs, time_launches(stream, ctx.policy, launch));
    schema::GemmEntry e;
    e.m = gc.m;
    e.n = gc.n;
    e.k = gc.k;
    e.batch = gc.batch;
    e.dtype = gc.dtype;
    e.time_us = secs * 1e6;
    e.tflops_per_s = 2.0 * static_cast<double>(gc.m) * static_cast<double>(gc.n) *
                     static_cast<double>(gc.k) * static_cast<double>(gc.batch) / secs / 1e12;
    e.meta.role = gc.role;
    e.meta.source = schema::ProfileSource::kMeasured;
    e.meta.citation = ctx.citation + "; gemm set=" + gemm_set_name(gc.set) + ", cuBLASLt TN";
    out.push_back(e);
    bar.step(what);
  }
  return out;
}

}  // namespace alpasim::exec::microbench
