#include "exec/gemm_layout.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/check.h"
#include "ir/graph.h"

namespace alpasim::exec {
namespace {

using i64 = std::int64_t;

std::vector<i64> row_major_strides(const std::vector<i64>& shape) {
  std::vector<i64> st(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) st[i - 1] = st[i] * shape[i];
  return st;
}

/// A letter class seen from one operand: `extent` elements, the i-th at offset i·stride
/// (stride 0 when the extent is 1: any stride will do).
struct Axis {
  i64 extent = 1, stride = 0;
};

/// The class's letters (outer first) flattened in one operand, or nullopt when their
/// offsets are not one progression (letters out of order or not adjacent in that operand).
std::optional<Axis> flatten(const std::string& letters, const std::string& term, const std::vector<i64>& shape) {
  const std::vector<i64> st = row_major_strides(shape);
  Axis a;
  for (char c : letters) {
    const auto pos = term.find(c);
    if (pos == std::string::npos) return std::nullopt;  // the class holds it in every operand it names
    const i64 n = shape[pos], s = st[pos];
    if (n == 1) continue;
    if (a.extent == 1) {
      a = {n, s};
      continue;
    }
    if (a.stride != s * n) return std::nullopt;  // the outer letter does not step over the inner
    a = {a.extent * n, s};
  }
  return a;
}

/// One GEMM operand (rows x cols): as stored (leading dimension = column stride, rows
/// contiguous) or transposed (leading dimension = row stride, columns contiguous).
struct Operand {
  bool trans = false;
  i64 ld = 1;
};

std::optional<Operand> as_operand(const Axis& rows, const Axis& cols) {
  const i64 r = rows.extent, c = cols.extent;
  if (r == 1 || rows.stride == 1) {
    const i64 ld = c == 1 ? std::max<i64>(1, r) : cols.stride;
    if (ld >= std::max<i64>(1, r)) return Operand{false, ld};
  }
  if (c == 1 || cols.stride == 1) {
    const i64 ld = r == 1 ? std::max<i64>(1, c) : rows.stride;
    if (ld >= std::max<i64>(1, c)) return Operand{true, ld};
  }
  return std::nullopt;
}

bool fits_int(i64 v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

}  // namespace

std::optional<StridedGemm> plan_strided_gemm(const ir::DotSpec& spec, const std::vector<i64>& lhs_shape,
                                             const std::vector<i64>& rhs_shape,
                                             const std::vector<i64>& out_shape) {
  if (lhs_shape.size() != spec.lhs.size() || rhs_shape.size() != spec.rhs.size() ||
      out_shape.size() != spec.out.size()) {
    return std::nullopt;
  }
  // Letters of each class in order of first appearance, as the packing path orders them.
  std::string cls[4];
  std::string seen;
  for (char c : spec.lhs + spec.rhs + spec.out) {
    if (seen.find(c) != std::string::npos) continue;
    seen += c;
    cls[static_cast<int>(ir::dot_dim_class(spec, c))] += c;
  }
  const std::string &B = cls[0], &M = cls[1], &N = cls[2], &K = cls[3];
  auto lb = flatten(B, spec.lhs, lhs_shape), rb = flatten(B, spec.rhs, rhs_shape), ob = flatten(B, spec.out, out_shape);
  auto lm = flatten(M, spec.lhs, lhs_shape), om = flatten(M, spec.out, out_shape);
  auto rn = flatten(N, spec.rhs, rhs_shape), on = flatten(N, spec.out, out_shape);
  auto lk = flatten(K, spec.lhs, lhs_shape), rk = flatten(K, spec.rhs, rhs_shape);
  if (!lb || !rb || !ob || !lm || !om || !rn || !on || !lk || !rk) return std::nullopt;

  // Row-major out[m, n] = sum_k lhs[m, k] rhs[k, n]. BLAS writes X column-major, so X is
  // out^T (p = n, q = m: P = rhs^T, Q = lhs^T) when the output's n axis is contiguous, or
  // out itself (p = m, q = n: P = lhs, Q = rhs) when its m axis is.
  for (const bool p_is_lhs : {false, true}) {
    const Axis& xr = p_is_lhs ? *om : *on;  // X's rows and columns in the output
    const Axis& xc = p_is_lhs ? *on : *om;
    if (!(xr.extent == 1 || xr.stride == 1)) continue;
    const i64 ld_x = xc.extent == 1 ? std::max<i64>(1, xr.extent) : xc.stride;
    if (ld_x < std::max<i64>(1, xr.extent)) continue;
    // P is p x k, Q is k x q.
    const auto P = p_is_lhs ? as_operand(*lm, *lk) : as_operand(*rn, *rk);
    const auto Q = p_is_lhs ? as_operand(*rk, *rn) : as_operand(*lk, *lm);
    if (!P || !Q) continue;
    StridedGemm g;
    g.p_is_lhs = p_is_lhs;
    g.trans_p = P->trans;
    g.trans_q = Q->trans;
    g.p = xr.extent;
    g.q = xc.extent;
    g.k = lk->extent;
    g.batch = ob->extent;
    g.ld_p = P->ld;
    g.ld_q = Q->ld;
    g.ld_x = ld_x;
    g.stride_p = p_is_lhs ? lb->stride : rb->stride;
    g.stride_q = p_is_lhs ? rb->stride : lb->stride;
    g.stride_x = ob->stride;
    if (!fits_int(g.p) || !fits_int(g.q) || !fits_int(g.k) || !fits_int(g.batch) || !fits_int(g.ld_p) ||
        !fits_int(g.ld_q) || !fits_int(g.ld_x)) {
      return std::nullopt;
    }
    return g;
  }
  return std::nullopt;
}

void run_strided_gemm_on_host(const StridedGemm& g, std::span<const float> lhs, std::span<const float> rhs,
                              std::span<float> out) {
  const std::span<const float> P = g.p_is_lhs ? lhs : rhs;
  const std::span<const float> Q = g.p_is_lhs ? rhs : lhs;
  auto at = [](std::span<const float> a, i64 base, bool trans, i64 ld, i64 i, i64 j) {
    const i64 idx = base + (trans ? j + i * ld : i + j * ld);
    ALPASIM_CHECK(idx >= 0 && static_cast<std::size_t>(idx) < a.size()) << "operand element " << idx << " of " << a.size();
    return a[static_cast<std::size_t>(idx)];
  };
  for (i64 b = 0; b < g.batch; ++b) {
    for (i64 j = 0; j < g.q; ++j) {
      for (i64 i = 0; i < g.p; ++i) {
        double acc = 0;
        for (i64 l = 0; l < g.k; ++l) {
          acc += static_cast<double>(at(P, b * g.stride_p, g.trans_p, g.ld_p, i, l)) *
                 at(Q, b * g.stride_q, g.trans_q, g.ld_q, l, j);
        }
        const i64 x = b * g.stride_x + i + j * g.ld_x;
        ALPASIM_CHECK(x >= 0 && static_cast<std::size_t>(x) < out.size()) << "output element " << x << " of " << out.size();
        out[static_cast<std::size_t>(x)] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace alpasim::exec
