#include "cost_model/attention_fit.h"
#include "cost_model/calibration.h"

#include <doctest/doctest.h>

#include <cmath>

#include "core/attention_tiles.h"

namespace alpasim::cost_model {
namespace {

cluster::GpuSpec h200() { return *cluster::find_gpu_spec("h200"); }

schema::AttentionEntry row(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d, std::int64_t dv) {
  schema::AttentionEntry e;
  e.batch = b;
  e.heads = h;
  e.kv_heads = h;
  e.seq = s;
  e.head_dim = d;
  e.v_head_dim = dv;
  e.dtype = core::DType::kBf16;
  return e;
}

ComputeParams with_attention(AttentionCurve forward, AttentionCurve backward) {
  ComputeParams p;
  for (auto& g : p.gemm) g = {0.5, 0};
  p.hbm_efficiency = 0.5;
  p.attention = {forward, backward};
  return p;
}

TEST_CASE("attention terms of one kernel, by hand") {
  // b 2, 8 heads, 1,024 queries and keys (8 tiles of 128: causal share 9/16), d 192, dv 128.
  const auto e = row(2, 8, 1024, 192, 128);
  const double share = 9.0 / 16.0, heads = 16, s2 = 1024.0 * 1024.0;
  CHECK(core::causal_tile_fraction(1024) == share);
  const AttentionTerms f = attention_terms(e, false);
  CHECK(f.flops == 2 * heads * s2 * (192 + 128) * share);
  CHECK(f.score_elements == heads * s2 * share);
  CHECK(f.output_elements == heads * 1024 * 128);
  const AttentionTerms b = attention_terms(e, true);
  CHECK(b.flops == 2 * heads * s2 * (3 * 192 + 2 * 128) * share);
  CHECK(b.score_elements == 2 * heads * s2 * share);
  CHECK(b.output_elements == heads * 1024 * (128 + 2 * 192));
  // Grouped-query attention: dQ per query head, dK and dV per key/value head.
  auto grouped = e;
  grouped.kv_heads = 2;
  CHECK(attention_terms(grouped, true).output_elements == heads * 1024 * 192 + 2 * 2 * 1024 * (192 + 128));
  CHECK(attention_terms(grouped, false).output_elements == f.output_elements);
  auto full = e;
  full.causal = false;
  CHECK(attention_terms(full, false).flops == 2 * heads * s2 * (192 + 128));
}

TEST_CASE("the kernel's dots priced one by one sum to the kernel's curve time") {
  // What the simulator prices (one flash_attention_dot per graph dot) equals what calibration
  // fits (attention_time_s of the whole kernel), forward and backward.
  const AttentionCurve fwd{0.7, 30e-6, 250, 180}, bwd{0.6, 70e-6, 300, 2700};
  ComputeCostModel m(h200(), with_attention(fwd, bwd));
  const auto e = row(4, 16, 4096, 128, 128);
  const std::int64_t bh = 64, s = 4096, d = 128;
  const double share = core::causal_tile_fraction(s), peak = h200().peak(core::DType::kBf16).value();
  auto dot = [&](std::int64_t mm, std::int64_t nn, std::int64_t kk, bool backward, bool scores, bool starts) {
    return m.flash_attention_dot({{mm, nn, kk, bh, core::DType::kBf16}, {!backward, backward, scores, !scores, starts, share}})
        .time.value();
  };
  const double forward_s = dot(s, s, d, false, true, true) + dot(s, d, s, false, false, false);
  const double backward_s = dot(s, s, d, true, true, true) + dot(s, s, d, true, true, false) +
                            dot(s, d, s, true, false, false) + 2 * dot(s, d, s, true, false, false);
  CHECK(forward_s == doctest::Approx(attention_time_s(fwd, attention_terms(e, false), peak)).epsilon(1e-12));
  CHECK(backward_s == doctest::Approx(attention_time_s(bwd, attention_terms(e, true), peak)).epsilon(1e-12));
  // The fixed cost is charged once per kernel: only on the dot that starts it.
  CHECK(dot(s, s, d, false, true, true) - dot(s, s, d, false, true, false) == doctest::Approx(30e-6));
  // By hand: the forward's P·V dot, 2·bh·s·s·d·share flops at 0.7 of peak plus bh·s·d outputs.
  const double pv_flops = 2.0 * bh * s * s * d * share;
  CHECK(dot(s, d, s, false, false, false) ==
        doctest::Approx(pv_flops / (0.7 * peak) + 180.0 * bh * s * d / peak).epsilon(1e-12));
  // A dot in both kernels (the recomputed scores when the forward kernel runs again) costs
  // its share of each.
  const GemmShape scores{s, s, d, bh, core::DType::kBf16};
  CHECK(m.flash_attention_dot({scores, {true, true, true, false, true, share}}).time.value() ==
        doctest::Approx(dot(s, s, d, false, true, true) + dot(s, s, d, true, true, true)).epsilon(1e-12));
}

TEST_CASE("without an attention curve a flash dot is priced as its GEMM times the work share") {
  ComputeCostModel m(h200(), with_attention({}, {}));
  const GemmShape g{2048, 2048, 128, 32, core::DType::kBf16};
  CHECK(m.flash_attention_dot({g, {false, true, true, false, true, 0.53}}).time.value() ==
        doctest::Approx(m.gemm(g).time.value() * 0.53).epsilon(1e-12));
}

TEST_CASE("the attention fit recovers the curve that generated its rows") {
  const AttentionCurve truth{0.75, 40e-6, 300, 2000};
  const double peak = h200().peak(core::DType::kBf16).value();
  std::vector<AttentionTerms> rows;
  std::vector<double> peaks;
  for (std::int64_t b : {1, 2, 8}) {
    for (std::int64_t h : {4, 32}) {
      for (std::int64_t s : {2048, 8192}) {
        for (std::int64_t d : {64, 128}) {
          AttentionTerms t = attention_terms(row(b, h, s, d, d), true);
          t.measured_s = attention_time_s(truth, t, peak);
          rows.push_back(t);
          peaks.push_back(peak);
        }
      }
    }
  }
  const auto fitted = fit_attention_curve(rows, peaks);
  REQUIRE(fitted.ok());
  CHECK(fitted->max_efficiency == doctest::Approx(truth.max_efficiency).epsilon(1e-6));
  CHECK(fitted->fixed_s == doctest::Approx(truth.fixed_s).epsilon(1e-6));
  CHECK(fitted->score_element_flops == doctest::Approx(truth.score_element_flops).epsilon(1e-6));
  CHECK(fitted->output_element_flops == doctest::Approx(truth.output_element_flops).epsilon(1e-6));
  // A term the rows say is negative is held at 0 and the rest refitted: times with no
  // per-output cost at all, minus a little, must not give a negative output_element_flops.
  const AttentionCurve no_output{0.75, 40e-6, 300, 0};
  for (AttentionTerms& t : rows) t.measured_s = attention_time_s(no_output, t, peak) - 50 * t.output_elements / peak;
  const auto clamped = fit_attention_curve(rows, peaks);
  REQUIRE(clamped.ok());
  CHECK(clamped->output_element_flops == 0);
  CHECK(clamped->max_efficiency > 0);
  // One head dimension: the FLOPs are proportional to the score elements, so the fit cannot
  // tell them apart, and says so instead of returning an arbitrary split.
  std::vector<AttentionTerms> one_dim;
  std::vector<double> one_dim_peaks;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i % 2 == 0) {  // the head dimension alternates 64, 128 in the loops above
      one_dim.push_back(rows[i]);
      one_dim_peaks.push_back(peaks[i]);
    }
  }
  const auto degenerate = fit_attention_curve(one_dim, one_dim_peaks);
  REQUIRE_FALSE(degenerate.ok());
  CHECK(degenerate.status().message().find("one head dimension") != std::string::npos);
  // Too few rows to fit four terms.
  rows.resize(4);
  peaks.resize(4);
  CHECK(fit_attention_curve(rows, peaks).status().message() == "4 rows fit, at least 5 needed");
}

TEST_CASE("backward rows within twice the fastest backward do not fit") {
  std::vector<AttentionTerms> rows(4);
  rows[0].measured_s = 0.34e-3;
  rows[1].measured_s = 0.58e-3;
  rows[2].measured_s = 0.67e-3;  // under 2x: still at the floor
  rows[3].measured_s = 0.69e-3;
  CHECK(backward_rows_above_host_floor(rows) == std::vector<char>{0, 0, 0, 1});
}

TEST_CASE("a calibration without attention rows takes another machine's curve, a fitted one keeps its own") {
  CalibratedParams source = default_params();
  source.compute.attention = {AttentionCurve{0.9, 3e-5, 250, 190}, AttentionCurve{0.8, 7e-5, 310, 2750}};
  source.origin["attention/forward"] = "fitted: hgx-h200 (35 rows)";
  source.origin["attention/backward"] = "fitted: hgx-h200 (30 rows)";
  CalibratedParams target = default_params();
  CHECK(target.compute.attention[0].max_efficiency == 0);  // the defaults fit no curve
  target.compute.attention[1] = {0.5, 1e-5, 100, 100};
  target.origin["attention/backward"] = "fitted: my-machine (12 rows)";
  inherit_attention_where_default(target, source, "hgx-h200");
  CHECK(target.compute.attention[0].max_efficiency == 0.9);
  CHECK(target.origin["attention/forward"] == "inherited: attention/forward of hgx-h200 (fractions of this GPU's peak)");
  CHECK(target.compute.attention[1].max_efficiency == 0.5);
  CHECK(target.origin["attention/backward"] == "fitted: my-machine (12 rows)");
}

}  // namespace
}  // namespace alpasim::cost_model
