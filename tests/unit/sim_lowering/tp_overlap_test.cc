// Transformer Engine's userbuffers overlap (sim/lowering/tp_overlap.h): the closed forms on
// numbers worked by hand, and TE's default settings.
#include <doctest/doctest.h>

#include "sim/lowering/tp_overlap.h"

#include <algorithm>

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

// The same schedules as event timelines, independent of the closed forms: each GEMM chunk
// starts when the previous chunk is done and its input has arrived; each transfer starts when
// its data exists and the previous transfer is done. Returns the time past the GEMMs' own.
enum class Schedule { kRingGather, kRingGatherAggregated, kRingScatter, kPipelineScatter };
double timeline_exposed(Schedule schedule, int tp, double gemm_per_rank_chunk, double chunk_transfer,
                        double final_reduce = 0) {
  const double g = gemm_per_rank_chunk, c = chunk_transfer;
  double gemm_end = 0, link_end = 0;
  switch (schedule) {
    case Schedule::kRingGather:  // chunk k arrives at k·c (chunk 0 is local)
      for (int k = 0; k < tp; ++k) gemm_end = std::max(gemm_end, k * c) + g;
      return gemm_end - tp * g;
    case Schedule::kRingGatherAggregated:  // one chunk swapped first, then pairs
      link_end = c;
      for (int j = 0; j < tp / 2; ++j) {
        gemm_end = std::max(gemm_end, link_end) + 2 * g;
        if (j + 1 < tp / 2) link_end += 2 * c;
      }
      return gemm_end - tp * g;
    case Schedule::kRingScatter:  // partial k leaves after GEMM k; the last chunk is local
      for (int k = 0; k < tp; ++k) {
        gemm_end += g;
        if (k + 1 < tp) link_end = std::max(link_end, gemm_end) + c;
      }
      return std::max(gemm_end, link_end) + final_reduce - tp * g;
    case Schedule::kPipelineScatter:  // tp = chunks here; chunk k's scatter after GEMM k
      for (int k = 0; k < tp; ++k) {
        gemm_end += g;
        link_end = std::max(link_end, gemm_end) + c;
      }
      return link_end - tp * g;
  }
  return 0;
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
  // Aggregated: one 2 s chunk swapped first, then 4 GEMMs of 2 s behind 3 transfers of 4 s.
  const TpOverlapGemm aggregated{TpOverlapMethod::kRingExchange, 1, false, 0, true};
  r = overlap_with_userbuffers(aggregated, input(8, 14, false, 4, 132));
  CHECK(r.exposed.value() == doctest::Approx(2.0 + 3.0 * 2.0));
  // Reduce-scatter: partials straight to their owners behind the next chunk, then the sum.
  TpOverlapInput scatter = input(8, 14, true, 8, 132);
  scatter.final_reduce = Seconds(0.5);
  r = overlap_with_userbuffers(ring, scatter);
  CHECK(r.exposed.value() == doctest::Approx(7.0 + 0.5));
}

TEST_CASE("userbuffers closed forms agree with event timelines of the same schedules") {
  const TpOverlapGemm ring{TpOverlapMethod::kRingExchange, 1, false, 0, false};
  const TpOverlapGemm aggregated{TpOverlapMethod::kRingExchange, 1, false, 0, true};
  const TpOverlapGemm pipeline{TpOverlapMethod::kPipeline, 0, true, 0, false};
  for (int tp : {2, 4, 8}) {
    for (double g : {0.25, 1.0, 3.0}) {
      for (double c : {0.1, 1.0, 2.5}) {
        CAPTURE(tp);
        CAPTURE(g);
        CAPTURE(c);
        const double comm = c * (tp - 1);  // tp - 1 chunk transfers
        TpOverlapInput in = input(g * tp, comm, false, tp, 132);
        in.tp = tp;
        CHECK(overlap_with_userbuffers(ring, in).exposed.value() ==
              doctest::Approx(timeline_exposed(Schedule::kRingGather, tp, g, c)));
        in.splits = tp_overlap_splits(aggregated, tp);
        CHECK(overlap_with_userbuffers(aggregated, in).exposed.value() ==
              doctest::Approx(timeline_exposed(Schedule::kRingGatherAggregated, tp, g, c)));
        in.splits = tp;
        in.reduce_scatter = true;
        in.final_reduce = Seconds(0.3);
        CHECK(overlap_with_userbuffers(ring, in).exposed.value() ==
              doctest::Approx(timeline_exposed(Schedule::kRingScatter, tp, g, c, 0.3)));
        // Pipeline: tp chunks standing for num_splits, each scatter c, comm = c·chunks.
        in.comm = Seconds(c * tp);
        in.final_reduce = Seconds(0);
        CHECK(overlap_with_userbuffers(pipeline, in).exposed.value() ==
              doctest::Approx(timeline_exposed(Schedule::kPipelineScatter, tp, g, c)));
      }
    }
  }
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
  // fp8 buffers: TE's default marks the all-gathers ("AllGather buffers use fp8 when using
  // fp8 recipe"), not the scatters.
  for (R r : {R::kQkvFprop, R::kQkvDgrad, R::kProjDgrad, R::kFc1Fprop, R::kFc1Dgrad, R::kFc2Dgrad}) {
    CHECK(te[r].fp8_buf);
  }
  for (R r : {R::kProjFprop, R::kFc2Fprop, R::kQkvWgrad, R::kFc1Wgrad}) CHECK_FALSE(te[r].fp8_buf);
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
  // The methods Transformer Engine does not run for a role are errors naming it.
  TpOverlapConfig wrong = te;
  wrong[R::kQkvFprop].method = TpOverlapMethod::kPipeline;
  CHECK(validate_tp_overlap_config(wrong, 132, 8, "/x").message() ==
        "/x/qkv_fprop/method: expected \"ring_exchange\" (what Transformer Engine runs for qkv_fprop), "
        "got \"pipeline\"");
  wrong = te;
  wrong[R::kFc2Fprop].method = TpOverlapMethod::kBulk;
  CHECK(validate_tp_overlap_config(wrong, 132, 8, "/x").message() ==
        "/x/fc2_fprop/method: expected \"ring_exchange\" or \"pipeline\" (what Transformer Engine runs "
        "for fc2_fprop), got \"bulk\"");
  wrong = te;
  wrong[R::kQkvWgrad].method = TpOverlapMethod::kRingExchange;
  CHECK_FALSE(validate_tp_overlap_config(wrong, 132, 8, "/x").ok());
}

}  // namespace
}  // namespace alpasim::sim::lowering
