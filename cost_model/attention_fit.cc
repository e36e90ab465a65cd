#include "cost_model/attention_fit.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/attention_tiles.h"
#include "core/check.h"

namespace alpasim::cost_model {
namespace {

constexpr int kTerms = 4;  // 1/max_efficiency, score_element_flops, output_element_flops, fixed_s

// Solves the normal equations of the active columns by Gaussian elimination with partial
// pivoting (4 x 4 at most); the columns are scaled to unit diagonal first (unscaled, the
// H200 rows' Gram matrix has a condition number of about 1e16). False when a pivot is below
// 1e-9 of its column's scale: the active columns are (nearly) collinear.
bool solve(const std::array<std::array<double, kTerms>, kTerms>& a, const std::array<double, kTerms>& b,
           const std::array<bool, kTerms>& active, std::array<double, kTerms>& x) {
  std::vector<std::size_t> cols;
  for (std::size_t i = 0; i < kTerms; ++i) {
    if (active[i]) cols.push_back(i);
  }
  const std::size_t n = cols.size();
  std::vector<double> scale(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (!(a[cols[r]][cols[r]] > 0)) return false;
    scale[r] = 1.0 / std::sqrt(a[cols[r]][cols[r]]);
  }
  std::vector<std::vector<double>> m(n, std::vector<double>(n + 1));
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t c = 0; c < n; ++c) m[r][c] = a[cols[r]][cols[c]] * scale[r] * scale[c];
    m[r][n] = b[cols[r]] * scale[r];
  }
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t pivot = i;
    for (std::size_t r = i + 1; r < n; ++r) {
      if (std::abs(m[r][i]) > std::abs(m[pivot][i])) pivot = r;
    }
    std::swap(m[i], m[pivot]);
    if (std::abs(m[i][i]) < 1e-9) return false;
    for (std::size_t r = i + 1; r < n; ++r) {
      const double f = m[r][i] / m[i][i];
      for (std::size_t c = i; c <= n; ++c) m[r][c] -= f * m[i][c];
    }
  }
  x.fill(0.0);
  std::vector<double> y(n);
  for (std::size_t i = n; i-- > 0;) {
    double v = m[i][n];
    for (std::size_t c = i + 1; c < n; ++c) v -= m[i][c] * y[c];
    y[i] = v / m[i][i];
  }
  for (std::size_t i = 0; i < n; ++i) x[cols[i]] = y[i] * scale[i];
  return true;
}

}  // namespace

AttentionTerms attention_terms(const schema::AttentionEntry& row, bool backward) {
  const double heads = static_cast<double>(row.batch) * static_cast<double>(row.heads);
  const double s = static_cast<double>(row.seq);
  const double dq = static_cast<double>(row.head_dim), dv = static_cast<double>(row.v_head_dim);
  const double share = row.causal ? core::causal_tile_fraction(row.seq) : 1.0;
  AttentionTerms t;
  if (!backward) {
    t.flops = 2 * heads * s * s * (dq + dv) * share;  // S = QK^T, O = PV
    t.score_elements = heads * s * s * share;
    t.output_elements = heads * s * dv;
    t.measured_s = row.forward_us * 1e-6;
  } else {
    // S recomputed and dQ, dK (head_dim); dP and dV (v_head_dim). dQ is written per query
    // head, dK and dV per key/value head (grouped-query attention: the kernel sums a group's
    // gradients; the graph's dK and dV dots have those shapes too).
    const double kv_heads = static_cast<double>(row.batch) * static_cast<double>(row.kv_heads);
    t.flops = 2 * heads * s * s * (3 * dq + 2 * dv) * share;
    t.score_elements = 2 * heads * s * s * share;
    t.output_elements = heads * s * dq + kv_heads * s * (dq + dv);
    t.measured_s = row.backward_us * 1e-6;
  }
  return t;
}

double attention_time_s(const AttentionCurve& c, const AttentionTerms& t, double peak) {
  ALPASIM_CHECK(c.max_efficiency > 0 && peak > 0) << c.max_efficiency << ", " << peak;
  return t.flops / (c.max_efficiency * peak) +
         (t.score_elements * c.score_element_flops + t.output_elements * c.output_element_flops) / peak +
         c.fixed_s;
}

core::Result<AttentionCurve> fit_attention_curve(const std::vector<AttentionTerms>& rows,
                                                 const std::vector<double>& peaks) {
  ALPASIM_CHECK(rows.size() == peaks.size()) << rows.size() << " vs " << peaks.size();
  if (rows.size() < kTerms + 1) {
    return core::invalid_argument(std::to_string(rows.size()) + " rows fit, at least " +
                                  std::to_string(kTerms + 1) + " needed");
  }
  // Row i: sum_j x_j f_ij / t_i = 1 with f = (flops/peak, scores/peak, outputs/peak, 1).
  std::array<std::array<double, kTerms>, kTerms> ata{};
  std::array<double, kTerms> atb{};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const AttentionTerms& r = rows[i];
    ALPASIM_CHECK(r.measured_s > 0 && peaks[i] > 0) << r.measured_s << ", " << peaks[i];
    const std::array<double, kTerms> f = {r.flops / peaks[i] / r.measured_s,
                                          r.score_elements / peaks[i] / r.measured_s,
                                          r.output_elements / peaks[i] / r.measured_s, 1.0 / r.measured_s};
    for (std::size_t a = 0; a < kTerms; ++a) {
      for (std::size_t b = 0; b < kTerms; ++b) ata[a][b] += f[a] * f[b];
      atb[a] += f[a];
    }
  }
  std::array<bool, kTerms> active = {true, true, true, true};
  std::array<double, kTerms> x{};
  for (int round = 0; round < kTerms; ++round) {
    if (!solve(ata, atb, active, x)) {
      return core::invalid_argument(
          "the rows cannot separate the terms (one head dimension only? then the FLOPs and "
          "the score elements are proportional): measure at least two head dimensions");
    }
    // The most negative active term is fixed at 0 and the others refitted.
    std::size_t worst = kTerms;
    for (std::size_t j = 0; j < kTerms; ++j) {
      if (active[j] && x[j] < 0 && (worst == kTerms || x[j] < x[worst])) worst = j;
    }
    if (worst == kTerms) break;
    if (worst == 0) return core::invalid_argument("the fit gives the tensor-core term a negative cost");
    active[worst] = false;
    x[worst] = 0;
  }
  if (!(x[0] > 0) || !std::isfinite(x[0])) {
    return core::invalid_argument("the fit gives no positive tensor-core term");
  }
  AttentionCurve c;
  c.max_efficiency = 1.0 / x[0];
  c.score_element_flops = std::max(0.0, x[1]);
  c.output_element_flops = std::max(0.0, x[2]);
  c.fixed_s = std::max(0.0, x[3]);
  return c;
}

std::vector<char> backward_rows_above_host_floor(const std::vector<AttentionTerms>& rows) {
  double fastest = 0;
  for (const AttentionTerms& r : rows) {
    if (fastest == 0 || r.measured_s < fastest) fastest = r.measured_s;
  }
  std::vector<char> keep;
  keep.reserve(rows.size());
  for (const AttentionTerms& r : rows) keep.push_back(r.measured_s > 2 * fastest ? 1 : 0);
  return keep;
}

}  // namespace alpasim::cost_model
