#include "cost_model/compute_cost.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/check.h"

namespace alpasim::cost_model {
namespace {

int dtype_index(core::DType d) { return static_cast<int>(d); }

// Index i with v[i] <= x <= v[i+1], or -1 when x is outside [v.front(), v.back()].
int bracket(const std::vector<double>& v, double x) {
  if (v.size() < 2 || x < v.front() || x > v.back()) return -1;
  auto it = std::upper_bound(v.begin(), v.end(), x);
  auto i = static_cast<int>(it - v.begin()) - 1;
  return std::min(i, static_cast<int>(v.size()) - 2);
}

}  // namespace

core::Flops gemm_flops(const GemmShape& s) {
  return core::Flops(2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) *
                     static_cast<double>(s.k) * static_cast<double>(s.batch));
}

core::Bytes gemm_min_bytes(const GemmShape& s) {
  return core::Bytes((s.m * s.k + s.k * s.n + s.m * s.n) * s.batch * core::dtype_bytes(s.dtype));
}

GemmShape conv_as_gemm(const ConvShape& c) {
  const std::int64_t out_h = (c.height + 2 * c.padding - c.kernel_h) / c.stride + 1;
  const std::int64_t out_w = (c.width + 2 * c.padding - c.kernel_w) / c.stride + 1;
  return GemmShape{c.batch * std::max<std::int64_t>(out_h, 1) * std::max<std::int64_t>(out_w, 1),
                   c.out_channels, c.in_channels * c.kernel_h * c.kernel_w, 1, c.dtype};
}

ComputeCostModel::ComputeCostModel(cluster::GpuSpec gpu, ComputeParams params,
                                   const std::vector<schema::GemmEntry>& gemm_table,
                                   const std::vector<schema::ConvEntry>& conv_table)
    : gpu_(std::move(gpu)), params_(params) {
  ALPASIM_CHECK(params_.gemm[dtype_index(core::DType::kFp16)].max_efficiency > 0)
      << "the fp16 GEMM curve must be calibrated (it is the fallback of every dtype)";
  std::array<std::set<std::tuple<double, double, double>>, 5> pts;
  std::array<std::map<std::tuple<double, double, double>, double>, 5> vals;
  for (const auto& e : gemm_table) {
    const std::int64_t m = e.m * e.batch;  // a batched GEMM runs like one with batch*m rows
    exact_s_[{m, e.n, e.k, dtype_index(e.dtype)}] = e.time_us * 1e-6;
    const auto key = std::make_tuple(std::log(static_cast<double>(m)),
                                     std::log(static_cast<double>(e.n)),
                                     std::log(static_cast<double>(e.k)));
    pts[static_cast<std::size_t>(dtype_index(e.dtype))].insert(key);
    vals[static_cast<std::size_t>(dtype_index(e.dtype))][key] = std::log(e.time_us * 1e-6);
  }
  for (std::size_t d = 0; d < 5; ++d) {
    std::set<double> ms, ns, ks;
    for (const auto& [m, n, k] : pts[d]) {
      ms.insert(m);
      ns.insert(n);
      ks.insert(k);
    }
    // A grid only when every (m, n, k) combination was measured and each axis has 2+ values.
    if (ms.size() < 2 || ns.size() < 2 || ks.size() < 2 ||
        pts[d].size() != ms.size() * ns.size() * ks.size()) {
      continue;
    }
    Grid& g = grids_[d];
    g.log_m.assign(ms.begin(), ms.end());
    g.log_n.assign(ns.begin(), ns.end());
    g.log_k.assign(ks.begin(), ks.end());
    for (double m : g.log_m) {
      for (double n : g.log_n) {
        for (double k : g.log_k) g.log_time.push_back(vals[d][{m, n, k}]);
      }
    }
  }
  for (const auto& e : conv_table) {
    conv_exact_s_[{e.batch, e.in_channels, e.out_channels, e.height, e.width, e.kernel_h,
                   e.kernel_w, e.stride * 1000 + e.padding, dtype_index(e.dtype)}] =
        e.time_us * 1e-6;
  }
}

ComputeEstimate ComputeCostModel::gemm_model(const GemmShape& s) const {
  ComputeEstimate est;
  est.flops = gemm_flops(s);
  est.source = ComputeSource::kModel;
  const double x = est.flops.value();
  GemmCurve curve = params_.gemm[static_cast<std::size_t>(dtype_index(s.dtype))];
  if (curve.max_efficiency <= 0) curve = params_.gemm[dtype_index(core::DType::kFp16)];
  double peak = gpu_.peak(s.dtype).value();
  if (peak <= 0) peak = gpu_.peak(core::DType::kFp32).value();  // e.g. bf16 on V100: emulated
  double eff = curve.max_efficiency * x / (x + curve.half_size_flops);
  if (curve.ceiling_efficiency > 0) eff = std::min(eff, curve.ceiling_efficiency);
  const double t_compute = x / (eff * peak);
  const double t_memory = static_cast<double>(gemm_min_bytes(s).value()) /
                          (params_.hbm_efficiency * gpu_.hbm_bandwidth.value());
  est.time = core::Seconds(std::max(t_compute, t_memory));
  est.achieved = est.flops / est.time;
  return est;
}

ComputeEstimate ComputeCostModel::flash_attention_dot(const FlashDot& dot) const {
  const core::FlashDotShare& share = dot.share;
  ALPASIM_CHECK(share.work_fraction > 0 && share.work_fraction <= 1) << share.work_fraction;
  ALPASIM_CHECK(share.in_forward_kernel || share.in_backward_kernel) << "a flash dot runs in some kernel";
  ComputeEstimate est;
  est.flops = gemm_flops(dot.gemm) * share.work_fraction;
  est.source = ComputeSource::kModel;
  if (params_.attention[0].max_efficiency <= 0 || params_.attention[1].max_efficiency <= 0) {
    est.time = gemm(dot.gemm).time * share.work_fraction;
  } else {
    double peak = gpu_.peak(dot.gemm.dtype).value();
    if (peak <= 0) peak = gpu_.peak(core::DType::kFp32).value();  // as gemm_model
    const double elements = static_cast<double>(dot.gemm.batch) * static_cast<double>(dot.gemm.m) *
                            static_cast<double>(dot.gemm.n) * (share.score_shaped ? share.work_fraction : 1.0);
    double time_s = 0;
    for (const bool backward : {false, true}) {
      if (!(backward ? share.in_backward_kernel : share.in_forward_kernel)) continue;
      const AttentionCurve& curve = params_.attention[backward ? 1 : 0];
      const double element_flops = share.score_shaped    ? curve.score_element_flops
                                   : share.writes_output ? curve.output_element_flops
                                                       : 0.0;
      time_s += est.flops.value() / (curve.max_efficiency * peak) + elements * element_flops / peak +
                (share.starts_kernel ? curve.fixed_s : 0.0);
    }
    est.time = core::Seconds(time_s);
  }
  est.achieved = est.time.value() > 0 ? est.flops / est.time : core::FlopsPerSecond(0);
  return est;
}

ComputeEstimate ComputeCostModel::gemm(const GemmShape& s) const {
  const int d = dtype_index(s.dtype);
  const std::int64_t m = s.m * s.batch;
  auto it = exact_s_.find({m, s.n, s.k, d});
  if (it != exact_s_.end()) {
    ComputeEstimate est;
    est.flops = gemm_flops(s);
    est.time = core::Seconds(it->second);
    est.achieved = est.flops / est.time;
    est.source = ComputeSource::kTable;
    return est;
  }
  const Grid& g = grids_[static_cast<std::size_t>(d)];
  if (!g.log_time.empty()) {
    const double lm = std::log(static_cast<double>(m));
    const double ln = std::log(static_cast<double>(s.n));
    const double lk = std::log(static_cast<double>(s.k));
    const int i = bracket(g.log_m, lm), j = bracket(g.log_n, ln), l = bracket(g.log_k, lk);
    if (i >= 0 && j >= 0 && l >= 0) {
      const auto nn = g.log_n.size(), nk = g.log_k.size();
      const double fm = (lm - g.log_m[static_cast<std::size_t>(i)]) /
                        (g.log_m[static_cast<std::size_t>(i) + 1] - g.log_m[static_cast<std::size_t>(i)]);
      const double fn = (ln - g.log_n[static_cast<std::size_t>(j)]) /
                        (g.log_n[static_cast<std::size_t>(j) + 1] - g.log_n[static_cast<std::size_t>(j)]);
      const double fk = (lk - g.log_k[static_cast<std::size_t>(l)]) /
                        (g.log_k[static_cast<std::size_t>(l) + 1] - g.log_k[static_cast<std::size_t>(l)]);
      double acc = 0;
      for (int a = 0; a < 2; ++a) {
        for (int b = 0; b < 2; ++b) {
          for (int c = 0; c < 2; ++c) {
            const double w = (a ? fm : 1 - fm) * (b ? fn : 1 - fn) * (c ? fk : 1 - fk);
            const auto idx = ((static_cast<std::size_t>(i + a)) * nn + static_cast<std::size_t>(j + b)) * nk +
                             static_cast<std::size_t>(l + c);
            acc += w * g.log_time[idx];
          }
        }
      }
      ComputeEstimate est;
      est.flops = gemm_flops(s);
      est.time = core::Seconds(std::exp(acc));
      est.achieved = est.flops / est.time;
      est.source = ComputeSource::kInterpolated;
      return est;
    }
  }
  return gemm_model(s);
}

ComputeEstimate ComputeCostModel::conv(const ConvShape& c) const {
  auto it = conv_exact_s_.find({c.batch, c.in_channels, c.out_channels, c.height, c.width,
                                c.kernel_h, c.kernel_w, c.stride * 1000 + c.padding,
                                dtype_index(c.dtype)});
  const GemmShape g = conv_as_gemm(c);
  ComputeEstimate est;
  est.flops = gemm_flops(g);
  if (it != conv_exact_s_.end()) {
    est.time = core::Seconds(it->second);
    est.source = ComputeSource::kTable;
  } else {
    est.time = gemm_model(g).time * params_.conv_slowdown;
    est.source = ComputeSource::kModel;
  }
  est.achieved = est.flops / est.time;
  return est;
}

core::Seconds ComputeCostModel::memory_bound(core::Bytes bytes) const {
  return core::Seconds(static_cast<double>(bytes.value()) /
                           (params_.hbm_efficiency * gpu_.hbm_bandwidth.value()) +
                       params_.kernel_overhead_s);
}

}  // namespace alpasim::cost_model
