#include "sim/lowering/tp_overlap.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace alpasim::sim::lowering {
namespace {

constexpr const char* kRoleNames[kNumTpOverlapGemmRoles] = {
    "qkv_fprop", "proj_fprop", "fc1_fprop", "fc2_fprop", "qkv_dgrad",
    "qkv_wgrad", "proj_dgrad", "fc1_dgrad", "fc1_wgrad", "fc2_dgrad",
};

}  // namespace

std::optional<TpOverlapMethod> parse_tp_overlap_method(std::string_view name) {
  if (name == "ring_exchange") return TpOverlapMethod::kRingExchange;
  if (name == "pipeline") return TpOverlapMethod::kPipeline;
  if (name == "bulk") return TpOverlapMethod::kBulk;
  return std::nullopt;
}

const char* tp_overlap_method_name(TpOverlapMethod method) {
  switch (method) {
    case TpOverlapMethod::kRingExchange: return "ring_exchange";
    case TpOverlapMethod::kPipeline: return "pipeline";
    case TpOverlapMethod::kBulk: return "bulk";
  }
  ALPASIM_CHECK(false) << "unknown TpOverlapMethod";
  return "";
}

const char* tp_overlap_gemm_role_name(TpOverlapGemmRole role) {
  const int i = static_cast<int>(role);
  ALPASIM_CHECK(i >= 0 && i < kNumTpOverlapGemmRoles) << "unknown TpOverlapGemmRole " << i;
  return kRoleNames[i];
}

std::optional<TpOverlapGemmRole> parse_tp_overlap_gemm_role(std::string_view name) {
  for (int i = 0; i < kNumTpOverlapGemmRoles; ++i) {
    if (name == kRoleNames[i]) return static_cast<TpOverlapGemmRole>(i);
  }
  return std::nullopt;
}

std::array<TpOverlapGemm, kNumTpOverlapGemmRoles> TpOverlapConfig::transformer_engine_default() {
  // Transformer Engine's get_default_config (transformer_engine/pytorch/module/base.py,
  // initialize_ub): num_sm 1 and no margin for ring exchange (copy engines move the data),
  // 16 SMs with the margin otherwise; num_splits tp for ring exchange, 4 for pipeline.
  const TpOverlapGemm ring{TpOverlapMethod::kRingExchange, 1, false, 0, false};
  const TpOverlapGemm pipeline{TpOverlapMethod::kPipeline, 16, true, 0, false};
  const TpOverlapGemm bulk{TpOverlapMethod::kBulk, 16, true, 0, false};
  std::array<TpOverlapGemm, kNumTpOverlapGemmRoles> d;
  using R = TpOverlapGemmRole;
  for (R r : {R::kQkvFprop, R::kFc1Fprop, R::kProjDgrad, R::kFc2Dgrad}) d[static_cast<std::size_t>(r)] = ring;
  for (R r : {R::kProjFprop, R::kFc2Fprop}) d[static_cast<std::size_t>(r)] = pipeline;
  for (R r : {R::kQkvDgrad, R::kQkvWgrad, R::kFc1Dgrad, R::kFc1Wgrad}) d[static_cast<std::size_t>(r)] = bulk;
  // "AllGather buffers use fp8 when using fp8 recipe" (TE's layers_all_gather_overlap).
  for (R r : {R::kQkvFprop, R::kQkvDgrad, R::kProjDgrad, R::kFc1Fprop, R::kFc1Dgrad, R::kFc2Dgrad}) {
    d[static_cast<std::size_t>(r)].fp8_buf = true;
  }
  return d;
}

int tp_overlap_splits(const TpOverlapGemm& setting, std::int64_t tp) {
  switch (setting.method) {
    case TpOverlapMethod::kBulk: return 1;
    case TpOverlapMethod::kPipeline: return setting.num_splits > 0 ? setting.num_splits : 4;
    case TpOverlapMethod::kRingExchange: {  // one chunk per rank (TE ignores num_splits)
      const int n = static_cast<int>(tp);
      return setting.aggregate ? std::max(1, n / 2) : n;
    }
  }
  ALPASIM_CHECK(false) << "unknown TpOverlapMethod";
  return 1;
}

TpOverlapResult overlap_with_userbuffers(const TpOverlapGemm& setting, const TpOverlapInput& in) {
  ALPASIM_CHECK(in.sms >= 1 && setting.num_sm >= 0 && setting.num_sm < in.sms)
      << "num_sm " << setting.num_sm << " of " << in.sms << " SMs";
  ALPASIM_CHECK(in.splits >= 1 && in.tp >= 2) << "splits " << in.splits << ", tp " << in.tp;
  ALPASIM_CHECK(setting.method != TpOverlapMethod::kPipeline || in.reduce_scatter)
      << "a pipelined all-gather (Transformer Engine has none)";
  using core::Seconds;
  const double sms = static_cast<double>(in.sms);
  const double comm_sms = static_cast<double>(setting.num_sm);
  const bool uses_sms = setting.method != TpOverlapMethod::kRingExchange && setting.num_sm > 0;
  Seconds gemm = in.gemm_chunked;
  if (uses_sms && setting.set_sm_margin) gemm = gemm * (sms / (sms - comm_sms));
  const double n = static_cast<double>(in.splits);
  const Seconds g = gemm / n;
  const double ranks = static_cast<double>(in.tp);
  Seconds exposed{0};
  if (setting.method == TpOverlapMethod::kBulk) {
    exposed = std::max(Seconds{0}, in.comm - gemm);
  } else if (setting.method == TpOverlapMethod::kRingExchange && !in.reduce_scatter) {
    // tp - 1 transfers of one chunk each, c1 apiece. Not aggregated: the local chunk's GEMM
    // runs while the first arrives, each later GEMM while the next arrives. Aggregated: one
    // chunk is swapped with the neighbour first (the GEMMs wait for it), then tp/2 GEMMs of
    // two chunks run behind tp/2 - 1 transfers of two chunks.
    const Seconds c1 = in.comm / (ranks - 1.0);
    if (setting.aggregate) {
      exposed = c1 + std::max(Seconds{0}, c1 * 2.0 - g) * (n - 1.0);
    } else {
      exposed = std::max(Seconds{0}, c1 - g) * (n - 1.0);
    }
  } else if (setting.method == TpOverlapMethod::kRingExchange) {
    // Reduce-scatter: each GEMM chunk's partial goes straight to the rank that owns it behind
    // the next chunk's GEMM (the last chunk is the local one, never sent); then a kernel sums
    // the tp partials (in.final_reduce).
    const Seconds c1 = in.comm / (ranks - 1.0);
    exposed = std::max(Seconds{0}, c1 - g) * (n - 1.0) + in.final_reduce;
  } else {
    // Pipeline (reduce-scatter): each chunk's scatter behind the next chunk's GEMM, the last
    // one after every GEMM.
    const Seconds c = in.comm / n;
    exposed = c + std::max(Seconds{0}, c - g) * (n - 1.0);
  }
  if (uses_sms && !setting.set_sm_margin) gemm += (in.comm - exposed) * (comm_sms / sms);
  return {gemm, exposed};
}

core::Status validate_tp_overlap_config(const TpOverlapConfig& config, int sms, std::int64_t tp,
                                        std::string_view path) {
  for (int i = 0; i < kNumTpOverlapGemmRoles; ++i) {
    const TpOverlapGemm& s = config.gemm[static_cast<std::size_t>(i)];
    const std::string at = std::string(path) + "/" + kRoleNames[i];
    if (s.num_sm < 0 || s.num_sm >= sms) {
      return core::invalid_argument(at + "/num_sm: expected 0 .. " + std::to_string(sms - 1) +
                                    " (the GPU has " + std::to_string(sms) + " SMs), got " +
                                    std::to_string(s.num_sm));
    }
    if (s.num_splits < 0) {
      return core::invalid_argument(at + "/num_splits: expected >= 0 (0: the default), got " +
                                    std::to_string(s.num_splits));
    }
    if (s.method == TpOverlapMethod::kRingExchange && s.aggregate && tp % 2 != 0) {
      return core::invalid_argument(at + "/aggregate: pairs chunks, so it needs an even tp, got tp " +
                                    std::to_string(tp));
    }
    // The methods Transformer Engine runs for each role: bulk beside the backward's
    // dgrad/wgrad of the column-parallel linears; ring exchange for the all-gathers that
    // feed a GEMM; ring exchange or pipeline for the reduce-scatters that drain one.
    using R = TpOverlapGemmRole;
    const auto role = static_cast<R>(i);
    const bool bulk_role = role == R::kQkvDgrad || role == R::kQkvWgrad || role == R::kFc1Dgrad ||
                           role == R::kFc1Wgrad;
    const bool scatter_role = role == R::kProjFprop || role == R::kFc2Fprop;
    const bool allowed = bulk_role ? s.method == TpOverlapMethod::kBulk
                         : scatter_role ? s.method != TpOverlapMethod::kBulk
                                        : s.method == TpOverlapMethod::kRingExchange;
    if (!allowed) {
      return core::invalid_argument(at + "/method: expected " +
                                    (bulk_role      ? std::string("\"bulk\"")
                                     : scatter_role ? std::string("\"ring_exchange\" or \"pipeline\"")
                                                    : std::string("\"ring_exchange\"")) +
                                    " (what Transformer Engine runs for " + kRoleNames[i] + "), got \"" +
                                    tp_overlap_method_name(s.method) + "\"");
    }
  }
  return core::Status();
}

}  // namespace alpasim::sim::lowering
