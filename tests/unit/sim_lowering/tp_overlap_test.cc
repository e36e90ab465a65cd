// Transformer Engine's userbuffers overlap (sim/lowering/tp_overlap.h): the closed forms on
// numbers worked by hand, and TE's default settings.
#include <doctest/doctest.h>

#include "sim/lowering/tp_overlap.h"

namespace alpasim::sim::lowering {
namespace {

using core::Seconds;

TpOverlapInput input(double gemm_chunked_s, double comm_s, bool reduce_scatter, int splits, int sms) {
  TpOverlapInput in;
  in.gemm_chunked = Seconds(gemm_chunked_s);
  in.comm = Seconds(comm_s);
  in.reduce_scatter = reduce_scatter;
  in.tp = 8;
  in.splits = splits;
  in.sms = sms;
  return in;
}

TEST_CASE("userbuffers ring exchange: the local chunk first, each step's transfer beyond its GEMM exposed") {
  const TpOverlapGemm ring{TpOverlapMethod::kRingExchange, 1, false, 0, false};
  // 8 chunks of 1 s; 7 transfers of 2 s: 7 x (2 - 1) exposed; copy engines take no SM.
  TpOverlapResult r = overlap_with_userbuffers(ring, input(8, 14, false, 8, 132));
  CHECK(r.gemm.value() == doctest::Approx(8.0));
  CHECK(r.exposed.value() == doctest::Approx(7.0));
  // Transfers shorter than the chunks: all hidden.
  r = overlap_with_userbuffers(ring, input(8, 3.5, false, 8, 132));
  CHECK(r.exposed.value() == 0.0);
  // One chunk: nothing to overlap with.
  r = overlap_with_userbuffers(ring, input(8, 3.5, false, 1, 132));
  CHECK(r.exposed.value() == doctest::Approx(3.5));
  // Reduce-scatter by ring exchange: each chunk's partial leaves behind the next chunk, the
  // last one after all GEMMs: 14/8 + 7 x max(0, 14/8 - 1).
  r = overlap_with_userbuffers(ring, input(8, 14, true, 8, 132));
  CHECK(r.exposed.value() == doctest::Approx(1.75 + 7 * 0.75));
}

TEST_CASE("userbuffers pipeline: the GEMM on the SMs the reduce-scatter leaves, the last chunk's scatter exposed") {
  const TpOverlapGemm pipeline{TpOverlapMethod::kPipeline, 16, true, 0, false};
  // 4 chunks, 4 s on 132 SMs -> 4 x 132/116 on 116; chunk scatters of 2 s.
  const TpOverlapResult r = overlap_with_userbuffers(pipeline, input(4, 8, true, 4, 132));
  const double gemm = 4.0 * 132.0 / 116.0;
  CHECK(r.gemm.value() == doctest::Approx(gemm));
  CHECK(r.exposed.value() == doctest::Approx(2.0 + 3.0 * (2.0 - gemm / 4.0)));
}

TEST_CASE("userbuffers bulk: one collective beside one GEMM, with or without the SM margin") {
  // Without the margin the GEMM loses 16/128 of its rate while the 4 s collective runs.
  TpOverlapResult r = overlap_with_userbuffers({TpOverlapMethod::kBulk, 16, false, 0, false},
                                               input(10, 4, false, 1, 128));
  CHECK(r.exposed.value() == 0.0);
  CHECK(r.gemm.value() == doctest::Approx(10.0 + 4.0 * 16.0 / 128.0));
  // With it the GEMM runs on 112 SMs throughout; a 12 s collective outlasts it.
  r = overlap_with_userbuffers({TpOverlapMethod::kBulk, 16, true, 0, false}, input(10, 12, true, 1, 128));
  CHECK(r.gemm.value() == doctest::Approx(10.0 * 128.0 / 112.0));
  CHECK(r.exposed.value() == doctest::Approx(12.0 - 10.0 * 128.0 / 112.0));
  // No SM given: the GEMM is untouched.
  r = overlap_with_userbuffers({TpOverlapMethod::kBulk, 0, true, 0, false}, input(10, 4, false, 1, 128));
  CHECK(r.gemm.value() == 10.0);
}

TEST_CASE("userbuffers defaults are Transformer Engine's and names round-trip") {
  const TpOverlapConfig te;
  using R = TpOverlapGemmRole;
  for (R r : {R::kQkvFprop, R::kFc1Fprop, R::kProjDgrad, R::kFc2Dgrad}) {
    CHECK(te[r].method == TpOverlapMethod::kRingExchange);
    CHECK(te[r].set_sm_margin == false);
    CHECK(tp_overlap_splits(te[r], 8) == 8);
  }
  for (R r : {R::kProjFprop, R::kFc2Fprop}) {
    CHECK(te[r].method == TpOverlapMethod::kPipeline);
    CHECK(te[r].num_sm == 16);
    CHECK(te[r].set_sm_margin);
    CHECK(tp_overlap_splits(te[r], 8) == 4);
  }
  for (R r : {R::kQkvDgrad, R::kQkvWgrad, R::kFc1Dgrad, R::kFc1Wgrad}) {
    CHECK(te[r].method == TpOverlapMethod::kBulk);
    CHECK(te[r].num_sm == 16);
    CHECK(te[r].set_sm_margin);
    CHECK(tp_overlap_splits(te[r], 8) == 1);
  }
  // Aggregated ring exchange: half as many chunks.
  CHECK(tp_overlap_splits({TpOverlapMethod::kRingExchange, 1, false, 0, true}, 8) == 4);
  for (int i = 0; i < kNumTpOverlapGemmRoles; ++i) {
    const auto role = static_cast<R>(i);
    CHECK(parse_tp_overlap_gemm_role(tp_overlap_gemm_role_name(role)) == role);
  }
  CHECK(parse_tp_overlap_gemm_role("fc3_fprop") == std::nullopt);
  CHECK(parse_tp_overlap_method("pipeline") == TpOverlapMethod::kPipeline);
  CHECK(parse_tp_overlap_method("ring") == std::nullopt);
  CHECK(validate_tp_overlap_config(te, 132, 8, "/x").ok());
}

}  // namespace
}  // namespace alpasim::sim::lowering
