#include "cost_model/validated_error.h"

#include <algorithm>
#include <array>

namespace alpasim::cost_model {

namespace {

// One measured band: the GPU kinds it covers (GpuSpec::name prefixes), the training
// precision ("16-bit" for fp16/bf16, "fp8", or a block-scaled format), the MAPE a
// validation test measures (rounded up to 0.1 %; the test "validated error bands cover the
// measured MAPE" fails if the measurement exceeds it) and where it comes from.
struct Band {
  std::array<const char*, 2> gpus;  // a second prefix or nullptr
  const char* precision;
  double error;
  const char* source;
};

constexpr Band kBands[] = {
    // Megatron-LM SC'21 Table 1: 10 runs of GPT 1.7B-1T on 32-3,072 A100, fp16.
    {{"a100", nullptr}, "16-bit", 0.098,
     "Megatron-LM SC'21 Table 1 (10 runs, 32-3,072 A100, fp16): MAPE 9.7 %"},
    // Since 2026-11-27 flash attention is priced by the attention curve fitted to cuDNN's
    // kernel on the H200 (profiles/hgx-h200/2026-11-27-measured-attention.json); the GEMM
    // roofline it replaced was 30-60 % slow on the H100 and every band below grew with it.
    // The H200 is an H100 with more and faster memory: the same tensor cores and fabric.
    // Since the same day tp_comm_overlap is priced as Transformer Engine's userbuffers run it
    // (each collective beside its own GEMM, chunked GEMMs, SMs given to the communication).
    // NVIDIA NeMo / Megatron-Bridge H100 pre-training runs: 24 expressible rows (NeMo's four
    // GPT-3 rows since stop 39, with their architecture from NeMo's launcher configs; the
    // Nemotron-4 340B row since stop 41).
    {{"h100", "h200"}, "fp8", 0.134,
     "NVIDIA NeMo / Megatron-Bridge H100 runs (24 rows, fp8): MAPE 13.3 %"},
    // Megatron-Core README H100 weak scaling: 9 runs of GPT 2B-462B, bf16, published overlaps.
    {{"h100", "h200"}, "16-bit", 0.168,
     "Megatron-Core README H100 weak scaling (9 runs, bf16): MAPE 16.8 %"},
    // The same sources' Blackwell runs: B200 on dgx-b200; GB200 and GB300 NVL72 on their
    // presets with dgx-b200's calibration; the block-scaled rows are Llama 3 8B/70B and
    // 3.1 405B.
    {{"b200", nullptr}, "fp8", 0.204,
     "NVIDIA NeMo / Megatron-Bridge B200 runs (10 rows, fp8): MAPE 20.3 %"},
    {{"b200", nullptr}, "mxfp8", 0.228,
     "NVIDIA NeMo / Megatron-Bridge B200 runs (4 rows, mxfp8): MAPE 22.7 %"},
    {{"gb200", nullptr}, "fp8", 0.234,
     "NVIDIA NeMo / Megatron-Bridge GB200 NVL72 runs (14 rows, fp8): MAPE 23.3 %"},
    {{"gb200", nullptr}, "mxfp8", 0.262,
     "NVIDIA NeMo / Megatron-Bridge GB200 NVL72 runs (13 rows, mxfp8): MAPE 26.1 %"},
    {{"gb200", nullptr}, "nvfp4", 0.240,
     "NVIDIA NeMo / Megatron-Bridge GB200 NVL72 runs (9 rows, nvfp4): MAPE 24.0 %"},
    {{"gb300", nullptr}, "fp8", 0.059,
     "NVIDIA NeMo / Megatron-Bridge GB300 NVL72 runs (7 rows, fp8): MAPE 5.9 %"},
    {{"gb300", nullptr}, "mxfp8", 0.115,
     "NVIDIA NeMo / Megatron-Bridge GB300 NVL72 runs (10 rows, mxfp8): MAPE 11.4 %"},
    {{"gb300", nullptr}, "nvfp4", 0.190,
     "NVIDIA NeMo / Megatron-Bridge GB300 NVL72 runs (9 rows, nvfp4): MAPE 18.9 %"},
};

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

ValidatedError validated_error(std::string_view gpu, core::DType dtype,
                               std::string_view block_scaled) {
  // A block-scaled run's tensors are bf16, but its GEMMs are not: never the 16-bit tables.
  std::string_view precision = block_scaled;
  if (precision.empty()) {
    precision = dtype == core::DType::kFp8                                    ? "fp8"
                : dtype == core::DType::kFp16 || dtype == core::DType::kBf16 ? "16-bit"
                                                                              : "";
  }
  const Band* largest = &kBands[0];
  for (const Band& b : kBands) {
    const bool kind = std::any_of(b.gpus.begin(), b.gpus.end(), [&](const char* prefix) {
      return prefix != nullptr && starts_with(gpu, prefix);
    });
    if (kind && precision == b.precision) return {b.error, true, b.source};
    if (b.error > largest->error) largest = &b;
  }
  // No published run on this GPU and precision: the largest validated error as the band.
  return {largest->error, false,
          std::string("no published run on this GPU and dtype was compared: the largest "
                      "validated error as the band (") + largest->source + ")"};
}

}  // namespace alpasim::cost_model
