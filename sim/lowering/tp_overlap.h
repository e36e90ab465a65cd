#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"
#include "core/units.h"

namespace alpasim::sim::lowering {

/// How Transformer Engine's userbuffers overlap one tensor-parallel collective with the GEMM
/// beside it (Megatron-LM --tp-comm-overlap, with sequence parallelism). Spellings are TE's
/// (`ub_cfgs` of `initialize_ub`, Megatron's --tp-comm-overlap-cfg YAML).
enum class TpOverlapMethod : std::int8_t {
  /// The GEMM runs in one chunk of the tokens per tp rank (two with `aggregate`) while copy
  /// engines move the chunks (all-gather: around the ring, the local chunk first;
  /// reduce-scatter: each partial straight to its owner, then a kernel sums them). No SM is
  /// taken from the GEMM.
  kRingExchange,
  /// The GEMM runs in `num_splits` chunks; each chunk's reduce-scatter runs on `num_sm` SMs
  /// behind the next chunk; the last one is exposed.
  kPipeline,
  /// One collective on `num_sm` SMs beside one whole GEMM (the backward's all-gather of a
  /// column-parallel input behind its input-gradient GEMM, and the reduce-scatter of that
  /// gradient behind the weight-gradient GEMM).
  kBulk,
};

/// "ring_exchange" / "pipeline" / "bulk" -> the method; nullopt otherwise.
std::optional<TpOverlapMethod> parse_tp_overlap_method(std::string_view name);
const char* tp_overlap_method_name(TpOverlapMethod method);

/// One GEMM's overlap setting.
struct TpOverlapGemm {
  TpOverlapMethod method = TpOverlapMethod::kBulk;
  /// SMs the communication kernel occupies while it runs (pipeline, bulk; 0 .. SMs - 1).
  int num_sm = 16;
  /// The GEMM is launched on the SMs the communication leaves (TE's math_sm_count); false:
  /// it is launched on all of them and shares them with the communication while it runs.
  bool set_sm_margin = true;
  /// GEMM chunks of a pipeline; 0 = TE's default, 4. Ring exchange always runs one per tp
  /// rank (TE ignores the key there).
  int num_splits = 0;
  /// Ring exchange: two chunks per GEMM (half as many, twice as large).
  bool aggregate = false;
  /// In an fp8 run (per-tensor fp8 or MXFP8) the buffer holds the quantized tensor: 1 byte
  /// per element (+ MXFP8's scales) instead of the activation dtype's. As in Transformer
  /// Engine (`initialize_ub`): every all-gather's buffer is fp8 whatever this says (its
  /// default marks them), a pipelined reduce-scatter's when this is set; the bulk scatters
  /// ignore it.
  bool fp8_buf = false;
  bool operator==(const TpOverlapGemm&) const = default;
};

/// The ten GEMMs of a transformer block that userbuffers overlap, in TE's names. Forward:
/// QKV and fc1 (column-parallel) gather their input, proj and fc2 (row-parallel) reduce-
/// scatter their output. Backward: proj and fc2's input gradients gather the output
/// gradient first; QKV and fc1's input-gradient GEMMs overlap the re-gather of their input
/// (needed by the weight gradient) and their weight-gradient GEMMs the reduce-scatter of
/// the input gradient.
enum class TpOverlapGemmRole : std::int8_t {
  kQkvFprop,
  kProjFprop,
  kFc1Fprop,
  kFc2Fprop,
  kQkvDgrad,
  kQkvWgrad,
  kProjDgrad,
  kFc1Dgrad,
  kFc1Wgrad,
  kFc2Dgrad,
};
inline constexpr int kNumTpOverlapGemmRoles = 10;
/// "qkv_fprop", ... (TE's ub_cfgs keys), indexed by TpOverlapGemmRole.
const char* tp_overlap_gemm_role_name(TpOverlapGemmRole role);
std::optional<TpOverlapGemmRole> parse_tp_overlap_gemm_role(std::string_view name);

/// One setting per role. The default is Transformer Engine's when Megatron passes no
/// configuration (`initialize_ub`'s get_default_config): ring exchange for QKV/fc1 fprop and
/// proj/fc2 dgrad (copy engines, tp chunks); pipeline for proj/fc2 fprop (16 SMs, 4 chunks,
/// the GEMM on the other SMs); bulk for QKV/fc1 dgrad and wgrad (16 SMs, with the margin);
/// fp8 buffers for the all-gathers (TE's layers_all_gather_overlap).
struct TpOverlapConfig {
  std::array<TpOverlapGemm, kNumTpOverlapGemmRoles> gemm = transformer_engine_default();
  static std::array<TpOverlapGemm, kNumTpOverlapGemmRoles> transformer_engine_default();
  const TpOverlapGemm& operator[](TpOverlapGemmRole role) const {
    return gemm[static_cast<std::size_t>(role)];
  }
  TpOverlapGemm& operator[](TpOverlapGemmRole role) { return gemm[static_cast<std::size_t>(role)]; }
  bool operator==(const TpOverlapConfig&) const = default;
};

/// The GEMM chunks `setting` runs its GEMM in for a tp-way group (1 for bulk).
int tp_overlap_splits(const TpOverlapGemm& setting, std::int64_t tp);

/// One collective overlapped with its GEMM(s), all per GPU per microbatch.
struct TpOverlapInput {
  core::Seconds gemm_chunked{0};  ///< the GEMMs as tp_overlap_splits chunks, on every SM
  core::Seconds comm{0};          ///< the collective alone (all-gather or reduce-scatter)
  bool reduce_scatter = false;    ///< false: all-gather
  std::int64_t tp = 1;
  int splits = 1;                 ///< tp_overlap_splits
  int sms = 1;                    ///< the GPU's SMs
  /// Ring-exchange reduce-scatter: the kernel that sums the tp partials at the end.
  core::Seconds final_reduce{0};
};
struct TpOverlapResult {
  core::Seconds gemm{0};     ///< the GEMMs' time beside the communication
  core::Seconds exposed{0};  ///< communication not hidden
};
/// Closed forms (docs/scenario.md "tp_comm_overlap_cfg"), after Transformer Engine's
/// comm_gemm_overlap: n GEMM chunks of g each, c1 = comm / (tp - 1) one chunk's transfer.
/// Ring-exchange all-gather: the local chunk's GEMM runs while the first chunk arrives,
/// exposed (n - 1)·max(0, c1 - g); aggregated (n = tp/2), one chunk swapped first:
/// c1 + (n - 1)·max(0, 2·c1 - g). Ring-exchange reduce-scatter: each partial sent behind the
/// next chunk, the last chunk local: (n - 1)·max(0, c1 - g) + the summing kernel. Pipeline
/// reduce-scatter: c = comm / n per chunk, the last after every GEMM: c + (n - 1)·max(0, c -
/// g). Bulk: max(0, comm - gemm). SMs: with set_sm_margin the GEMM runs on sms - num_sm SMs
/// (time x sms / (sms - num_sm)); without, it loses num_sm / sms of its rate while the
/// communication runs (+ overlapped · num_sm / sms). Ring exchange uses copy engines: no SM
/// cost. Precondition (CHECK): 0 <= num_sm < sms, splits >= 1, tp >= 2, no pipelined
/// all-gather (validate_tp_overlap_config refuses the methods TE does not run for a role).
TpOverlapResult overlap_with_userbuffers(const TpOverlapGemm& setting, const TpOverlapInput& in);

/// Errors naming `path` (e.g. "/search/megatron/tp_comm_overlap_cfg/proj_fprop/num_sm")
/// when a setting cannot run on a GPU of `sms` SMs, or names a method Transformer Engine does
/// not run for its role (bulk: QKV/fc1 dgrad and wgrad; ring exchange: QKV/fc1 fprop and
/// proj/fc2 dgrad; ring exchange or pipeline: proj/fc2 fprop).
core::Status validate_tp_overlap_config(const TpOverlapConfig& config, int sms, std::int64_t tp,
                                        std::string_view path);

}  // namespace alpasim::sim::lowering
