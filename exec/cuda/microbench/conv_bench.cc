#include <cudnn.h>

#include <algorithm>
#include <memory>

#include "exec/cuda/microbench/bench_kernels.h"
#include "exec/cuda/microbench/benches.h"
#include "exec/cuda/microbench/progress.h"

namespace alpasim::exec::microbench {
namespace {

core::Status dnn_status(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return core::Status();
  return core::internal_error(what + ": " + cudnnGetErrorString(s));
}
#define DNN_TRY(expr, what) ALPASIM_RETURN_IF_ERROR(dnn_status((expr), (what)))

// Descriptors of one convolution, destroyed together.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descs() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

}  // namespace

core::Result<std::vector<schema::ConvEntry>> run_conv_cases(const std::vector<ConvCase>& cases,
                                                            const BenchContext& ctx, int& skipped) {
  skipped = 0;
  ALPASIM_CUDA_TRY(cudaSetDevice(ctx.device), "cudaSetDevice");
  cudnnHandle_t handle = nullptr;
  DNN_TRY(cudnnCreate(&handle), "cudnnCreate");
  std::unique_ptr<cudnnContext, decltype(&cudnnDestroy)> handle_owner(handle, cudnnDestroy);
  cudaStream_t stream = nullptr;
  ALPASIM_CUDA_TRY(cudaStreamCreate(&stream), "cudaStreamCreate");
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream_owner(stream, cudaStreamDestroy);
  DNN_TRY(cudnnSetStream(handle, stream), "cudnnSetStream");

  std::vector<schema::ConvEntry> out;
  Progress bar("conv", static_cast<std::int64_t>(cases.size()), ctx.progress);
  for (const auto& cc : cases) {
    const bool half = cc.dtype == core::DType::kFp16;
    const cudnnDataType_t dt = half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
    const std::size_t eb = half ? 2 : 4;
    const std::string what = cc.source + " " + std::to_string(cc.in_channels) + "->" +
                             std::to_string(cc.out_channels) + " " + std::to_string(cc.height) + "^2";
    Descs d;
    DNN_TRY(cudnnCreateTensorDescriptor(&d.x), "tensor descriptor");
    DNN_TRY(cudnnCreateTensorDescriptor(&d.y), "tensor descriptor");
    DNN_TRY(cudnnCreateFilterDescriptor(&d.w), "filter descriptor");
    DNN_TRY(cudnnCreateConvolutionDescriptor(&d.conv), "convolution descriptor");
    const int n = static_cast<int>(cc.batch), c = static_cast<int>(cc.in_channels);
    const int k = static_cast<int>(cc.out_channels), h = static_cast<int>(cc.height);
    const int w = static_cast<int>(cc.width), r = static_cast<int>(cc.kernel);
    DNN_TRY(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, dt, n, c, h, w), what);
    DNN_TRY(cudnnSetFilter4dDescriptor(d.w, dt, CUDNN_TENSOR_NCHW, k, c, r, r), what);
    const int pad = static_cast<int>(cc.padding), stride = static_cast<int>(cc.stride);
    DNN_TRY(cudnnSetConvolution2dDescriptor(d.conv, pad, pad, stride, stride, 1, 1,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), what);
    // fp16: tensor cores; fp32: plain FMA (no TF32), the arithmetic of Alpa's fp32 runs.
    DNN_TRY(cudnnSetConvolutionMathType(d.conv, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH), what);
    int on = 0, oc = 0, oh = 0, ow = 0;
    DNN_TRY(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &on, &oc, &oh, &ow), what);
    DNN_TRY(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, dt, on, oc, oh, ow), what);
    const std::size_t xb = static_cast<std::size_t>(n) * c * h * w * eb;
    const std::size_t wb = static_cast<std::size_t>(k) * c * r * r * eb;
    const std::size_t yb = static_cast<std::size_t>(on) * oc * oh * ow * eb;
    std::size_t free_b = 0, total_b = 0;
    ALPASIM_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (xb + wb + yb > free_b / 3) {  // leave room for the algorithms' workspaces
      ++skipped;
      bar.step(what + " (skipped)");
      continue;
    }
    DeviceBuffer x, wt, y;
    ALPASIM_RETURN_IF_ERROR(x.allocate(xb, "conv input"));
    ALPASIM_RETURN_IF_ERROR(wt.allocate(wb, "conv filter"));
    ALPASIM_RETURN_IF_ERROR(y.allocate(yb, "conv output"));
    const std::uint32_t keep = half ? 0x83FFu : 0x80FFFFFFu, set = half ? 0x3400u : 0x3E000000u;
    ALPASIM_CUDA_TRY(kernels::fill_pattern(x.get(), xb, static_cast<int>(eb), keep, set, 3, stream), "fill");
    ALPASIM_CUDA_TRY(kernels::fill_pattern(wt.get(), wb, static_cast<int>(eb), keep, set, 4, stream), "fill");
    // Autotune on our own buffers (the Ex variant allocates nothing itself), with a workspace
    // of half the memory left, at most 2 GiB; algorithms needing more are not tried.
    ALPASIM_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    const std::size_t ws_bytes = std::min<std::size_t>(free_b / 2, std::size_t{2} << 30);
    DeviceBuffer ws;
    ALPASIM_RETURN_IF_ERROR(ws.allocate(ws_bytes, "conv workspace"));
    constexpr int kAlgos = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    cudnnConvolutionFwdAlgoPerf_t perf[kAlgos];
    int returned = 0;
    DNN_TRY(cudnnFindConvolutionForwardAlgorithmEx(handle, d.x, x.get(), d.w, wt.get(), d.conv, d.y,
                                                   y.get(), kAlgos, &returned, perf, ws.get(), ws_bytes),
            "cudnnFindConvolutionForwardAlgorithmEx " + what);
    const cudnnConvolutionFwdAlgoPerf_t* best = nullptr;
    for (int i = 0; i < returned; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_bytes) {  // sorted by time
        best = &perf[i];
        break;
      }
    }
    if (best == nullptr) {
      ++skipped;
      bar.step(what + " (no algorithm)");
      continue;
    }
    const float alpha = 1.0f, beta = 0.0f;
    const cudnnConvolutionFwdAlgo_t algo = best->algo;
    auto launch = [&]() -> core::Status {
      return dnn_status(cudnnConvolutionForward(handle, &alpha, d.x, x.get(), d.w, wt.get(), d.conv,
                                                algo, ws.get(), ws_bytes, &beta, d.y, y.get()),
                        "cudnnConvolutionForward " + what);
    };
    ALPASIM_ASSIGN_OR_RETURN(double secs, time_launches(stream, ctx.policy, launch));
    schema::ConvEntry e;
    e.batch = cc.batch;
    e.in_channels = cc.in_channels;
    e.out_channels = cc.out_channels;
    e.height = cc.height;
    e.width = cc.width;
    e.kernel_h = cc.kernel;
    e.kernel_w = cc.kernel;
    e.stride = cc.stride;
    e.padding = cc.padding;
    e.dtype = cc.dtype;
    e.time_us = secs * 1e6;
    e.meta.role = cc.role;
    e.meta.source = schema::ProfileSource::kMeasured;
    e.meta.citation = ctx.citation + "; conv " + cc.source + ", cuDNN algo " +
                      std::to_string(static_cast<int>(algo));
    out.push_back(e);
    bar.step(what);
  }
  return out;
}

core::Result<std::vector<HbmResult>> run_hbm(std::int64_t array_bytes, const BenchContext& ctx) {
  ALPASIM_CUDA_TRY(cudaSetDevice(ctx.device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  ALPASIM_CUDA_TRY(cudaStreamCreate(&stream), "cudaStreamCreate");
  std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream_owner(stream, cudaStreamDestroy);
  const auto bytes = static_cast<std::size_t>(array_bytes);
  const std::size_t n = bytes / sizeof(float);
  DeviceBuffer a, b, c;
  ALPASIM_RETURN_IF_ERROR(a.allocate(bytes, "HBM a"));
  ALPASIM_RETURN_IF_ERROR(b.allocate(bytes, "HBM b"));
  ALPASIM_RETURN_IF_ERROR(c.allocate(bytes, "HBM c"));
  ALPASIM_CUDA_TRY(kernels::fill_pattern(b.get(), bytes, 4, 0x80FFFFFFu, 0x3E000000u, 5, stream), "fill");
  ALPASIM_CUDA_TRY(kernels::fill_pattern(c.get(), bytes, 4, 0x80FFFFFFu, 0x3E000000u, 6, stream), "fill");
  float* pa = static_cast<float*>(a.get());
  const float* pb = static_cast<const float*>(b.get());
  const float* pc = static_cast<const float*>(c.get());
  std::vector<HbmResult> out;
  Progress bar("hbm", 2, ctx.progress);
  {
    ALPASIM_ASSIGN_OR_RETURN(double s, time_launches(stream, ctx.policy, [&] {
      return cuda_status(kernels::launch_copy(pa, pb, n, stream), "copy kernel");
    }));
    const auto moved = static_cast<std::int64_t>(2 * n * sizeof(float));
    out.push_back({"copy", array_bytes, moved, s * 1e6, static_cast<double>(moved) / s / 1e9});
    bar.step("copy");
  }
  {
    ALPASIM_ASSIGN_OR_RETURN(double s, time_launches(stream, ctx.policy, [&] {
      return cuda_status(kernels::launch_triad(pa, pb, pc, 3.0f, n, stream), "triad kernel");
    }));
    const auto moved = static_cast<std::int64_t>(3 * n * sizeof(float));
    out.push_back({"triad", array_bytes, moved, s * 1e6, static_cast<double>(moved) / s / 1e9});
    bar.step("triad");
  }
  return out;
}

}  // namespace alpasim::exec::microbench
