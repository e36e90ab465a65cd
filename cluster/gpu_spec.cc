#include "cluster/gpu_spec.h"

namespace alpasim::cluster {

using core::gbyte_per_s;
using core::tflops_per_s;

core::FlopsPerSecond GpuSpec::peak(core::DType dtype) const {
  switch (dtype) {
    case core::DType::kFp32: return peak_fp32;
    case core::DType::kTf32: return peak_tf32;
    case core::DType::kFp16: return peak_fp16;
    case core::DType::kBf16: return peak_bf16;
    case core::DType::kFp8: return peak_fp8;
  }
  return core::FlopsPerSecond(0);
}

const std::vector<GpuSpec>& gpu_specs() {
  // Sources: NVIDIA datasheets as tabulated in validation/data/gemm.csv (peaks) and the
  // V100/A100/H100/H200 product briefs (memory, HBM bandwidth). Memory is the marketed
  // capacity (GiB for V100/A100/H100; H200's 141 GB is decimal). Streaming multiprocessors
  // (last field): the V100, A100 and H100 architecture whitepapers (80, 108, 132 enabled);
  // H200 and H800 are the H100's GH100 configuration; B200 148 enabled (Chips and Cheese,
  // "Nvidia's B200", 2025: 74 of 80 per die); GB200 taken as B200's, and B300/GB300 as
  // B200's too (an assumption: the enabled count of Blackwell Ultra parts is not in the
  // sources here); MI300X 304 compute units (AMD's specification).
  static const std::vector<GpuSpec> kSpecs = {
      {"v100-16gb", "NVIDIA Tesla V100-SXM2-16GB", core::gib(16), gbyte_per_s(900),
       tflops_per_s(15.7), tflops_per_s(15.7), tflops_per_s(125), tflops_per_s(0),
       tflops_per_s(0), tflops_per_s(0), false, 80},
      {"v100-32gb", "NVIDIA Tesla V100-SXM2-32GB", core::gib(32), gbyte_per_s(900),
       tflops_per_s(15.7), tflops_per_s(15.7), tflops_per_s(125), tflops_per_s(0),
       tflops_per_s(0), tflops_per_s(0), false, 80},
      {"a100-40gb", "NVIDIA A100-SXM4-40GB", core::gib(40), gbyte_per_s(1555),
       tflops_per_s(19.5), tflops_per_s(156), tflops_per_s(312), tflops_per_s(312),
       tflops_per_s(0), tflops_per_s(0), false, 108},
      {"a100-80gb", "NVIDIA A100-SXM4-80GB", core::gib(80), gbyte_per_s(2039),
       tflops_per_s(19.5), tflops_per_s(156), tflops_per_s(312), tflops_per_s(312),
       tflops_per_s(0), tflops_per_s(0), false, 108},
      {"h100-sxm", "NVIDIA H100 80GB HBM3 (SXM5)", core::gib(80), gbyte_per_s(3350),
       tflops_per_s(67), tflops_per_s(494.5), tflops_per_s(989), tflops_per_s(989),
       tflops_per_s(1979), tflops_per_s(0), false, 132},
      {"h200", "NVIDIA H200 141GB HBM3e (SXM)", core::Bytes(141'000'000'000), gbyte_per_s(4800),
       tflops_per_s(67), tflops_per_s(494.5), tflops_per_s(989), tflops_per_s(989),
       tflops_per_s(1979), tflops_per_s(0), false, 132},
      // H800 SXM5: the H100's GH100 die; third-party H800-vs-H100 comparisons of NVIDIA's
      // specifications (docs/cluster.md) name only FP64 (not modelled) and NVLink (the
      // dgx-h800 preset) as cut, so the low-precision peaks, memory and HBM bandwidth are
      // the H100 SXM5's here (an assumption for memory and bandwidth).
      {"h800-sxm", "NVIDIA H800 80GB HBM3 (SXM5)", core::gib(80), gbyte_per_s(3350),
       tflops_per_s(67), tflops_per_s(494.5), tflops_per_s(989), tflops_per_s(989),
       tflops_per_s(1979), tflops_per_s(0), false, 132},
      // HGX/DGX B200 (1,000 W): NVIDIA's HGX B200 specification table lists per GPU 180 GB
      // HBM3e at 7.7 TB/s, FP32 75 TFLOP/s and, with sparsity, TF32 2.2, FP16/BF16 4.5 and
      // FP8 9 PFLOP/s: dense is half (validation/data/gemm.csv line 18 gives the same
      // 2,250 TFLOP/s BF16 dense peak beside its MAMF measurement); dense NVFP4 10 PFLOP/s (the
      // ml-engineering per-chip table's nvfp4 column, from the DGX B200 datasheet; its plain
      // fp4 column says 9,000; docs/cluster.md).
      {"b200", "NVIDIA B200 180GB HBM3e (HGX)", core::Bytes(180'000'000'000), gbyte_per_s(7700),
       tflops_per_s(75), tflops_per_s(1100), tflops_per_s(2250), tflops_per_s(2250),
       tflops_per_s(4500), tflops_per_s(10000), true, 148},
      // HGX/DGX B300 (Blackwell Ultra): the ml-engineering per-chip table (citing NVIDIA's
      // DGX B300 datasheet): dense FP32 80, TF32 1,125, FP16/BF16 2,250, FP8 4,500, NVFP4
      // 15,000 TFLOP/s; its memory table: 288 GB HBM3e at 8 TB/s.
      {"b300", "NVIDIA B300 288GB HBM3e (HGX)", core::Bytes(288'000'000'000), gbyte_per_s(8000),
       tflops_per_s(80), tflops_per_s(1125), tflops_per_s(2250), tflops_per_s(2250),
       tflops_per_s(4500), tflops_per_s(15000), true, 148},
      // GB200 (the B200 of a Grace-Blackwell superchip, 1,200 W): NVIDIA's GB200 NVL72
      // specification lists per 72-GPU rack 13.4 TB HBM3e at 576 TB/s (186 GB, 8 TB/s per
      // GPU), FP32 5,760 TFLOP/s (80 per GPU) and, with sparsity, TF32 180, FP16/BF16 360 and
      // FP8 720 PFLOP/s: dense per GPU is half of rack / 72; dense FP4 10 PFLOP/s per GPU
      // (gemm.csv line 34: the ml-engineering per-chip table; docs/cluster.md).
      {"gb200", "NVIDIA GB200 (B200 186GB HBM3e, NVL72)", core::Bytes(186'000'000'000),
       gbyte_per_s(8000), tflops_per_s(80), tflops_per_s(1250), tflops_per_s(2500),
       tflops_per_s(2500), tflops_per_s(5000), tflops_per_s(10000), true, 148},
      // GB300 (Blackwell Ultra, 1,400 W): NVIDIA's GB300 NVL72 specification lists per rack
      // up to 20.1 TB HBM3e (279 GB per GPU) at 576 TB/s (8 TB/s per GPU) and, with
      // sparsity, TF32 180, FP16/BF16 360 and FP8 720 PFLOP/s, as GB200 (its gains are dense
      // FP4, 15 PFLOP/s per GPU against 10, and attention's exponentials, not modelled).
      {"gb300", "NVIDIA GB300 (Blackwell Ultra 279GB HBM3e, NVL72)", core::Bytes(279'000'000'000),
       gbyte_per_s(8000), tflops_per_s(80), tflops_per_s(1250), tflops_per_s(2500),
       tflops_per_s(2500), tflops_per_s(5000), tflops_per_s(15000), true, 148},
      // AMD Instinct MI300X (750 W): the ml-engineering per-chip table (citing AMD's MI300X
      // specification page): dense FP32 163.4, TF32 653.7, FP16/BF16 1,300, FP8 2,610
      // TFLOP/s (AMD's page rounds 1,307.4 / 2,614.9); no block-scaled formats (CDNA 4
      // adds them); its memory table: 192 GB HBM3 at 5.3 TB/s (gemm.csv lines 38-39).
      {"mi300x", "AMD Instinct MI300X 192GB HBM3 (OAM)", core::Bytes(192'000'000'000),
       gbyte_per_s(5300), tflops_per_s(163.4), tflops_per_s(653.7), tflops_per_s(1300),
       tflops_per_s(1300), tflops_per_s(2610), tflops_per_s(0), false, 304},
  };
  return kSpecs;
}

std::optional<GpuSpec> find_gpu_spec(std::string_view name) {
  for (const auto& spec : gpu_specs()) {
    if (spec.name == name) return spec;
  }
  return std::nullopt;
}

std::vector<std::string> gpu_spec_names() {
  std::vector<std::string> names;
  for (const auto& spec : gpu_specs()) names.push_back(spec.name);
  return names;
}

}  // namespace alpasim::cluster
