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
  /// The GEMM runs in `num_splits` chunks along the tokens while copy engines pass the
  /// chunks around the tp ring (all-gather: the local chunk first; reduce-scatter: the
  /// partial sums). No SM is taken from the GEMM.
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
  /// GEMM chunks (ring exchange, pipeline); 0 = TE's default: tp for ring exchange, 4 for
  /// pipeline.
  int num_splits = 0;
  /// Ring exchange: two chunks per GEMM (half as many, twice as large).
  bool aggregate = false;
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
/// the GEMM on the other SMs); bulk for QKV/fc1 dgrad and wgrad (16 SMs, with the margin).
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
};
struct TpOverlapResult {
  core::Seconds gemm{0};     ///< the GEMMs' time beside the communication
  core::Seconds exposed{0};  ///< communication not hidden
};
/// Closed forms (docs/scenario.md "tp_comm_overlap_cfg"). With c = comm / steps and g the
/// GEMM time per chunk: ring exchange all-gather computes the local chunk while the next
/// arrives, exposed (n - 1)·max(0, c - g) with c = comm / (n - 1) (all of comm when n = 1);
/// reduce-scatter (ring exchange or pipeline) sends each chunk's partial behind the next
/// chunk, exposed c + (n - 1)·max(0, c - g) with c = comm / n; bulk exposes max(0, comm -
/// gemm). SMs: with set_sm_margin the GEMM runs on sms - num_sm SMs (time x sms / (sms -
/// num_sm)); without, it loses num_sm / sms of its rate while the communication runs
/// (+ overlapped · num_sm / sms). Ring exchange uses copy engines: no SM cost.
/// Precondition (CHECK): 0 <= num_sm < sms, splits >= 1, tp >= 2.
TpOverlapResult overlap_with_userbuffers(const TpOverlapGemm& setting, const TpOverlapInput& in);

/// Errors naming `path` (e.g. "/search/megatron/tp_comm_overlap_cfg/proj_fprop/num_sm")
/// when a setting cannot run on a GPU of `sms` SMs or a tp-way group.
core::Status validate_tp_overlap_config(const TpOverlapConfig& config, int sms, std::int64_t tp,
                                        std::string_view path);

}  // namespace alpasim::sim::lowering
