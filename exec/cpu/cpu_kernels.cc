#include "exec/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace alpasim::exec::cpu {
namespace {

using Shape = std::vector<std::int64_t>;

// Every kernel is a template on the element type T: float is the backend's arithmetic;
// double runs the same code for the finite-difference gradient checks
// (tests/unit/exec/gradient_check_test.cc). Constants are written as floats and converted,
// so both instantiations compute with the same values.
template <class T> constexpr T kNormEps = static_cast<T>(1e-5f);
template <class T> constexpr T kAdamLr = static_cast<T>(1e-3f);
template <class T> constexpr T kAdamBeta1 = static_cast<T>(0.9f);
template <class T> constexpr T kAdamBeta2 = static_cast<T>(0.999f);
template <class T> constexpr T kAdamEps = static_cast<T>(1e-8f);
template <class T> constexpr T kSgdLr = static_cast<T>(1e-2f);
template <class T> constexpr T kSgdMomentum = static_cast<T>(0.9f);
/// Rotary position embedding base (LLaMA, RoFormer): pair i of a head turns by
/// position · kRotaryBase^(−2i/d) radians.
constexpr double kRotaryBase = 10000.0;

/// out[m, n] = sum_k lhs[m, k] · rhs[k, n], row-major. Blocked i-k-j loop: the inner loop
/// streams a row of rhs and of out.
template <class T>
void matmul_t(const T* lhs, const T* rhs, T* out, std::int64_t m, std::int64_t n, std::int64_t k) {
  constexpr std::int64_t kBlock = 64;
  std::fill(out, out + m * n, T(0));
  for (std::int64_t i0 = 0; i0 < m; i0 += kBlock) {
    for (std::int64_t k0 = 0; k0 < k; k0 += kBlock) {
      const std::int64_t i1 = std::min(i0 + kBlock, m), k1 = std::min(k0 + kBlock, k);
      for (std::int64_t i = i0; i < i1; ++i) {
        for (std::int64_t kk = k0; kk < k1; ++kk) {
          const T a = lhs[i * k + kk];
          const T* r = rhs + kk * n;
          T* o = out + i * n;
          for (std::int64_t j = 0; j < n; ++j) o[j] += a * r[j];
        }
      }
    }
  }
}

core::Status unsupported(const ir::Op& op, const std::string& why = "") {
  return core::unimplemented("op " + op.name + " (" + std::string(ir::op_kind_name(op.kind)) +
                             ", function \"" + op.function + "\"): the CPU backend cannot run it" +
                             (why.empty() ? "" : " (" + why + ")"));
}

std::int64_t product(const Shape& s, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

/// For a reduction of shape `in` to shape `out`: the out index of every in index.
/// Supported: to one element, to a suffix of `in` (broadcast operands), and NHWC -> NC.
bool reduce_map(const Shape& in, const Shape& out, std::vector<std::int64_t>& map) {
  const std::int64_t n = product(in, 0, in.size()), m = product(out, 0, out.size());
  map.assign(static_cast<std::size_t>(n), 0);
  if (m == 1) return true;
  if (out.size() <= in.size() && std::equal(out.begin(), out.end(), in.end() - static_cast<std::ptrdiff_t>(out.size()))) {
    for (std::int64_t i = 0; i < n; ++i) map[static_cast<std::size_t>(i)] = i % m;
    return true;
  }
  if (in.size() == 4 && out.size() == 2 && out[0] == in[0] && out[1] == in[3]) {
    const std::int64_t c = in[3], per = in[1] * in[2] * in[3];
    for (std::int64_t i = 0; i < n; ++i) map[static_cast<std::size_t>(i)] = (i / per) * c + i % c;
    return true;
  }
  return false;
}

template <class T>
T gelu(T x) {
  const T k = static_cast<T>(0.7978845608f);  // sqrt(2/pi), tanh approximation (GPT-2, Megatron)
  const T c = static_cast<T>(0.044715f);
  return T(0.5) * x * (T(1) + std::tanh(k * (x + c * x * x * x)));
}

template <class T>
T gelu_grad(T x) {
  const T k = static_cast<T>(0.7978845608f);
  const T c = static_cast<T>(0.044715f);
  const T u = k * (x + c * x * x * x);
  const T t = std::tanh(u);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x);
}

/// SiLU (swish): x · sigmoid(x), LLaMA's SwiGLU activation.
template <class T>
T silu(T x) {
  return x / (T(1) + std::exp(-x));
}

/// d silu / dx = sigmoid(x) · (1 + x · (1 − sigmoid(x))).
template <class T>
T silu_grad(T x) {
  const T s = T(1) / (T(1) + std::exp(-x));
  return s * (T(1) + x * (T(1) - s));
}

template <class T>
using View = BasicTensorView<T>;

/// True for an einsum that routes tokens by a MoE gate's output: the dispatch (forward or
/// recomputed) and the gradient of its token operand ("grad_rhs"; ir/autodiff.cc gives it
/// kind kMoeCombine, so the kind alone does not tell). Its lhs is the gate's combine
/// weights, of which it uses only the pattern, as GShard's dispatch mask = (combine > 0);
/// the graph gives the mask no gradient (ir/builders.cc), which this makes exact. The
/// combine and its gradients use the weights.
bool dispatches_by_mask(const ir::Graph& g, const ir::Op& op) {
  const ir::Op& forward = op.source != ir::kNoOp ? g.op(op.source) : op;
  return forward.kind == ir::OpKind::kMoeDispatch && !op.name.ends_with("/grad_lhs");
}

// ---- einsum (kDot, kMoeDispatch, kMoeCombine) ----
template <class T>
core::Status einsum(const ir::Graph& g, const ir::Op& op, const std::vector<View<T>>& in, View<T> out) {
  const ir::DotSpec& s = op.dot;
  std::vector<T> mask;
  View<T> a = in[0];
  if (dispatches_by_mask(g, op)) {
    mask.resize(static_cast<std::size_t>(a.size));
    for (std::int64_t i = 0; i < a.size; ++i) mask[static_cast<std::size_t>(i)] = a.data[i] != T(0) ? T(1) : T(0);
    a.data = mask.data();
  }
  const View<T>& b = in[1];
  auto strides = [](const Shape& sh) {
    Shape st(sh.size(), 1);
    for (std::size_t i = sh.size(); i-- > 1;) st[i - 1] = st[i] * sh[i];
    return st;
  };
  const Shape sa = strides(*a.shape), sb = strides(*b.shape), so = strides(*out.shape);
  struct Letter {
    std::int64_t size = 1, sa = 0, sb = 0, so = 0;
  };
  std::vector<Letter> batch, mdim, ndim, kdim;
  std::string letters = s.lhs + s.rhs + s.out;
  std::string seen;
  for (char c : letters) {
    if (seen.find(c) != std::string::npos) continue;
    seen += c;
    Letter l;
    const auto pa = s.lhs.find(c), pb = s.rhs.find(c), po = s.out.find(c);
    if (pa != std::string::npos) { l.size = (*a.shape)[pa]; l.sa = sa[pa]; }
    if (pb != std::string::npos) { l.size = (*b.shape)[pb]; l.sb = sb[pb]; }
    if (po != std::string::npos) { l.size = (*out.shape)[po]; l.so = so[po]; }
    switch (ir::dot_dim_class(s, c)) {
      case ir::DotDimClass::kBatch: batch.push_back(l); break;
      case ir::DotDimClass::kLhsFree: mdim.push_back(l); break;
      case ir::DotDimClass::kRhsFree: ndim.push_back(l); break;
      case ir::DotDimClass::kContracting: kdim.push_back(l); break;
    }
  }
  // Offsets of every combination of a class's letters, per operand.
  auto offsets = [](const std::vector<Letter>& ls, std::int64_t Letter::*st) {
    std::vector<std::int64_t> off{0};
    for (const Letter& l : ls) {
      std::vector<std::int64_t> next;
      next.reserve(off.size() * static_cast<std::size_t>(l.size));
      for (std::int64_t o : off) {
        for (std::int64_t i = 0; i < l.size; ++i) next.push_back(o + i * (l.*st));
      }
      off = std::move(next);
    }
    return off;
  };
  const auto ba = offsets(batch, &Letter::sa), bb = offsets(batch, &Letter::sb), bo = offsets(batch, &Letter::so);
  const auto ma = offsets(mdim, &Letter::sa), mo = offsets(mdim, &Letter::so);
  const auto nb = offsets(ndim, &Letter::sb), no = offsets(ndim, &Letter::so);
  const auto ka = offsets(kdim, &Letter::sa), kb = offsets(kdim, &Letter::sb);
  const auto M = static_cast<std::int64_t>(ma.size()), N = static_cast<std::int64_t>(nb.size());
  const auto K = static_cast<std::int64_t>(ka.size());
  std::vector<T> pa(static_cast<std::size_t>(M * K)), pb(static_cast<std::size_t>(K * N)),
      pc(static_cast<std::size_t>(M * N));
  for (std::size_t bi = 0; bi < ba.size(); ++bi) {
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t k = 0; k < K; ++k) {
        pa[static_cast<std::size_t>(m * K + k)] = a.data[ba[bi] + ma[static_cast<std::size_t>(m)] + ka[static_cast<std::size_t>(k)]];
      }
    }
    for (std::int64_t k = 0; k < K; ++k) {
      for (std::int64_t n = 0; n < N; ++n) {
        pb[static_cast<std::size_t>(k * N + n)] = b.data[bb[bi] + kb[static_cast<std::size_t>(k)] + nb[static_cast<std::size_t>(n)]];
      }
    }
    matmul_t(pa.data(), pb.data(), pc.data(), M, N, K);
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t n = 0; n < N; ++n) {
        out.data[bo[bi] + mo[static_cast<std::size_t>(m)] + no[static_cast<std::size_t>(n)]] = pc[static_cast<std::size_t>(m * N + n)];
      }
    }
  }
  if (in.size() > 2) {  // bias: a suffix of the output shape
    const std::int64_t nb_ = in[2].size;
    for (std::int64_t i = 0; i < out.size; ++i) out.data[i] += in[2].data[i % nb_];
  }
  return core::ok_status();
}

// ---- convolution (NHWC, HWIO, SAME padding) ----
template <class T>
void conv(const ir::ConvSpec& c, const T* x, const T* w, const T* dy, T* out) {
  const std::int64_t ho = c.out_h(), wo = c.out_w();
  const std::int64_t pt = std::max<std::int64_t>((ho - 1) * c.stride + c.kh - c.h, 0) / 2;
  const std::int64_t pl = std::max<std::int64_t>((wo - 1) * c.stride + c.kw - c.w, 0) / 2;
  for (std::int64_t n = 0; n < c.n; ++n) {
    for (std::int64_t oy = 0; oy < ho; ++oy) {
      for (std::int64_t ox = 0; ox < wo; ++ox) {
        for (std::int64_t ky = 0; ky < c.kh; ++ky) {
          const std::int64_t iy = oy * c.stride + ky - pt;
          if (iy < 0 || iy >= c.h) continue;
          for (std::int64_t kx = 0; kx < c.kw; ++kx) {
            const std::int64_t ix = ox * c.stride + kx - pl;
            if (ix < 0 || ix >= c.w) continue;
            const std::int64_t xi = ((n * c.h + iy) * c.w + ix) * c.ci;
            const std::int64_t wi = (ky * c.kw + kx) * c.ci * c.co;
            const std::int64_t yi = ((n * ho + oy) * wo + ox) * c.co;
            for (std::int64_t ci = 0; ci < c.ci; ++ci) {
              for (std::int64_t co = 0; co < c.co; ++co) {
                switch (c.variant) {
                  case ir::ConvSpec::Variant::kForward:
                    out[yi + co] += x[xi + ci] * w[wi + ci * c.co + co];
                    break;
                  case ir::ConvSpec::Variant::kGradInput:
                    out[xi + ci] += dy[yi + co] * w[wi + ci * c.co + co];
                    break;
                  case ir::ConvSpec::Variant::kGradFilter:
                    out[wi + ci * c.co + co] += x[xi + ci] * dy[yi + co];
                    break;
                }
              }
            }
          }
        }
      }
    }
  }
}

// ---- norms: rows of `width` elements (layer/RMS norm: last axis; batch-norm: channels) ----
template <class T>
struct NormStats {
  std::vector<T> mean, inv_std;
};

/// Layer/RMS norm: per row; batch-norm: per channel over all rows.
template <class T>
NormStats<T> norm_stats(ir::NormType t, const T* x, std::int64_t rows, std::int64_t width) {
  NormStats<T> s;
  const bool bn = t == ir::NormType::kBatchNorm;
  const std::int64_t groups = bn ? width : rows, count = bn ? rows : width;
  s.mean.assign(static_cast<std::size_t>(groups), T(0));
  s.inv_std.assign(static_cast<std::size_t>(groups), T(0));
  for (std::int64_t g = 0; g < groups; ++g) {
    double sum = 0, sq = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const double v = bn ? x[i * width + g] : x[g * width + i];
      sum += v;
      sq += v * v;
    }
    const double mean = t == ir::NormType::kRmsNorm ? 0.0 : sum / static_cast<double>(count);
    const double var = sq / static_cast<double>(count) - mean * mean;
    s.mean[static_cast<std::size_t>(g)] = static_cast<T>(mean);
    s.inv_std[static_cast<std::size_t>(g)] = static_cast<T>(1.0 / std::sqrt(std::max(var, 0.0) + kNormEps<double>));
  }
  return s;
}

template <class T>
void xhat(ir::NormType t, const T* x, std::int64_t rows, std::int64_t width, std::vector<T>& out) {
  const NormStats<T> s = norm_stats(t, x, rows, width);
  const bool bn = t == ir::NormType::kBatchNorm;
  out.resize(static_cast<std::size_t>(rows * width));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < width; ++c) {
      const auto g = static_cast<std::size_t>(bn ? c : r);
      out[static_cast<std::size_t>(r * width + c)] = (x[r * width + c] - s.mean[g]) * s.inv_std[g];
    }
  }
}

/// dx of y = xhat·gamma (+beta): per group of `count` elements,
/// dx = inv_std · (dxh − mean(dxh) − xhat · mean(dxh · xhat)), dxh = dy · gamma
/// (RMS norm: without the mean(dxh) term).
template <class T>
void norm_grad(ir::NormType t, const T* dy, const T* x, const T* gamma, std::int64_t rows,
               std::int64_t width, T* dx) {
  const NormStats<T> s = norm_stats(t, x, rows, width);
  const bool bn = t == ir::NormType::kBatchNorm;
  const std::int64_t groups = bn ? width : rows, count = bn ? rows : width;
  for (std::int64_t g = 0; g < groups; ++g) {
    auto at = [&](std::int64_t i) { return bn ? i * width + g : g * width + i; };
    double sum_d = 0, sum_dx = 0;
    const T mean = s.mean[static_cast<std::size_t>(g)], inv = s.inv_std[static_cast<std::size_t>(g)];
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t k = at(i);
      const double d = dy[k] * gamma[bn ? g : i];
      sum_d += d;
      sum_dx += d * (x[k] - mean) * inv;
    }
    const double md = t == ir::NormType::kRmsNorm ? 0.0 : sum_d / static_cast<double>(count);
    const double mdx = sum_dx / static_cast<double>(count);
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t k = at(i);
      const double d = dy[k] * gamma[bn ? g : i];
      const double xh = (x[k] - mean) * inv;
      dx[k] = static_cast<T>(inv * (d - md - xh * mdx));
    }
  }
}

ir::NormType norm_of_source(const ir::Graph& g, const ir::Op& op) {
  return op.source != ir::kNoOp ? g.op(op.source).norm : op.norm;
}

bool is_causal_softmax(const ir::Graph& g, const ir::Op& op) {
  const ir::Op& f = op.source != ir::kNoOp ? g.op(op.source) : op;
  return f.name.find("attn/softmax") != std::string::npos;
}

// The sliding window of an attention softmax (its forward op's Op::attention_window; 0:
// none).
std::int64_t attention_window_of(const ir::Graph& g, const ir::Op& op) {
  const ir::Op& f = op.source != ir::kNoOp ? g.op(op.source) : op;
  return f.attention_window;
}

template <class T>
void softmax_rows(const T* x, T* y, std::int64_t rows, std::int64_t width, std::int64_t causal_len,
                  std::int64_t window = 0) {
  for (std::int64_t r = 0; r < rows; ++r) {
    // Causal: query position s = r mod S may see keys t <= s; with a sliding window only
    // its `window` latest, s - window < t <= s.
    const std::int64_t limit = causal_len > 0 ? (r % causal_len) + 1 : width;
    const std::int64_t first = causal_len > 0 && window > 0 ? std::max<std::int64_t>(0, limit - window) : 0;
    const T* xr = x + r * width;
    T* yr = y + r * width;
    T mx = -std::numeric_limits<T>::infinity();
    for (std::int64_t i = first; i < limit; ++i) mx = std::max(mx, xr[i]);
    double sum = 0;
    for (std::int64_t i = 0; i < width; ++i) {
      yr[i] = i >= first && i < limit ? std::exp(xr[i] - mx) : T(0);
      sum += yr[i];
    }
    for (std::int64_t i = 0; i < width; ++i) yr[i] = static_cast<T>(yr[i] / sum);
  }
}

template <class T>
core::Status pool(const ir::Graph& g, const ir::Op& op, const std::vector<View<T>>& in, View<T> out) {
  const bool grad = op.function == "max_pool_grad";
  const ir::Op& f = grad ? g.op(op.source) : op;
  const Shape& xs = grad ? *in[1].shape : *in[0].shape;
  const T* x = grad ? in[1].data : in[0].data;
  const std::int64_t N = xs[0], H = xs[1], W = xs[2], C = xs[3];
  const std::int64_t k = f.pool_window, st = f.pool_stride;
  const std::int64_t ho = (H + st - 1) / st, wo = (W + st - 1) / st;
  const std::int64_t pt = std::max<std::int64_t>((ho - 1) * st + k - H, 0) / 2;
  const std::int64_t pl = std::max<std::int64_t>((wo - 1) * st + k - W, 0) / 2;
  if (grad) std::fill(out.data, out.data + out.size, T(0));
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t oy = 0; oy < ho; ++oy) {
      for (std::int64_t ox = 0; ox < wo; ++ox) {
        for (std::int64_t c = 0; c < C; ++c) {
          T best = -std::numeric_limits<T>::infinity();
          std::int64_t arg = -1;
          for (std::int64_t ky = 0; ky < k; ++ky) {
            const std::int64_t iy = oy * st + ky - pt;
            if (iy < 0 || iy >= H) continue;
            for (std::int64_t kx = 0; kx < k; ++kx) {
              const std::int64_t ix = ox * st + kx - pl;
              if (ix < 0 || ix >= W) continue;
              const std::int64_t xi = ((n * H + iy) * W + ix) * C + c;
              if (x[xi] > best) {
                best = x[xi];
                arg = xi;
              }
            }
          }
          const std::int64_t yi = ((n * ho + oy) * wo + ox) * C + c;
          if (grad) {
            if (arg >= 0) out.data[arg] += in[0].data[yi];
          } else {
            out.data[yi] = best;
          }
        }
      }
    }
  }
  return core::ok_status();
}

/// Rotary position embedding (RoFormer; LLaMA's "rotate half" layout) of x [b, s, ..., d]:
/// for j < d/2 the pair (x_j, x_{j+d/2}) of every head turns by s · kRotaryBase^(−2j/d)
/// radians, s the position on axis 1. `sign` −1 turns back: the gradient, since a rotation's
/// transpose is its inverse. The position axis must be whole (not split by a sharding).
template <class T>
core::Status rotary(const ir::Op& op, const View<T>& x, View<T> out, double sign) {
  const Shape& s = *out.shape;
  if (s.size() < 3 || s.back() % 2 != 0) return unsupported(op, "rotary needs [batch, seq, ..., even head dim]");
  if (op.out.shape.size() != s.size() || op.out.shape[1] != s[1]) {
    return unsupported(op, "rotary with the sequence axis split");
  }
  const std::int64_t d = s.back(), half = d / 2, seq = s[1], per_pos = product(s, 2, s.size());
  for (std::int64_t row = 0; row < out.size / d; ++row) {
    const std::int64_t pos = (row * d / per_pos) % seq;
    const T* xr = x.data + row * d;
    T* yr = out.data + row * d;
    for (std::int64_t j = 0; j < half; ++j) {
      const double angle = sign * static_cast<double>(pos) *
                           std::pow(kRotaryBase, -2.0 * static_cast<double>(j) / static_cast<double>(d));
      const T c = static_cast<T>(std::cos(angle)), sn = static_cast<T>(std::sin(angle));
      const T x1 = xr[j], x2 = xr[j + half];
      yr[j] = x1 * c - x2 * sn;
      yr[j + half] = x2 * c + x1 * sn;
    }
  }
  return core::ok_status();
}

template <class T>
core::Status elementwise(const ir::Graph& g, const ir::Op& op, const std::vector<View<T>>& in, View<T> out) {
  const std::string& fn = op.function;
  const std::int64_t n = out.size;
  auto operand = [&](std::size_t i, std::int64_t j) {
    return in[i].data[in[i].size == n ? j : j % in[i].size];
  };
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (fn == "broadcast" || fn == "softmax_cross_entropy_grad") break;
    if (in[i].size != n) {
      const Shape& s = *in[i].shape;
      const Shape& o = *out.shape;
      if (s.size() > o.size() || !std::equal(s.begin(), s.end(), o.end() - static_cast<std::ptrdiff_t>(s.size()))) {
        return unsupported(op, "operand " + std::to_string(i) + " broadcasts other than as a suffix");
      }
    }
  }
  if (fn == "add") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = operand(0, j) + operand(1, j);
  } else if (fn == "mul") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = operand(0, j) * operand(1, j);
  } else if (fn == "reshape" || fn == "identity" || fn == "cast") {
    std::copy(in[0].data, in[0].data + n, out.data);
  } else if (fn == "dropout_mask" || fn == "ones") {
    std::fill(out.data, out.data + n, T(1));  // dropout rate 0: see docs/executor.md
  } else if (fn == "gelu") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = gelu(in[0].data[j]);
  } else if (fn == "gelu_grad") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = in[0].data[j] * gelu_grad(in[1].data[j]);
  } else if (fn == "silu") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = silu(in[0].data[j]);
  } else if (fn == "silu_grad") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = in[0].data[j] * silu_grad(in[1].data[j]);
  } else if (fn == "rotary" || fn == "rotary_grad") {
    return rotary(op, in[0], out, fn == "rotary" ? 1.0 : -1.0);
  } else if (fn == "relu") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = std::max(in[0].data[j], T(0));
  } else if (fn == "relu_grad") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = in[1].data[j] > 0 ? in[0].data[j] : T(0);
  } else if (fn == "squared_relu") {
    for (std::int64_t j = 0; j < n; ++j) {
      const T r = std::max(in[0].data[j], T(0));
      out.data[j] = r * r;
    }
  } else if (fn == "squared_relu_grad") {
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = in[0].data[j] * T(2) * std::max(in[1].data[j], T(0));
  } else if (fn == "broadcast") {
    // Gradient of a reduction: spread dy back; a mean divides by the elements it averaged.
    std::vector<std::int64_t> map;
    if (!reduce_map(*out.shape, *in[0].shape, map)) return unsupported(op, "unsupported reduction shape");
    T f = T(1);
    if (op.source != ir::kNoOp && g.op(op.source).function == "mean") {
      f = static_cast<T>(in[0].size) / static_cast<T>(n);
    }
    for (std::int64_t j = 0; j < n; ++j) out.data[j] = in[0].data[map[static_cast<std::size_t>(j)]] * f;
  } else if (fn == "softmax_grad") {
    const std::int64_t w = out.shape->back();
    for (std::int64_t r = 0; r < n / w; ++r) {
      double dot = 0;
      for (std::int64_t i = 0; i < w; ++i) dot += in[0].data[r * w + i] * in[1].data[r * w + i];
      for (std::int64_t i = 0; i < w; ++i) {
        out.data[r * w + i] = static_cast<T>(in[1].data[r * w + i] * (in[0].data[r * w + i] - dot));
      }
    }
  } else if (fn == "softmax_cross_entropy_grad") {
    // d/dlogits of −log softmax(logits)[label], times the per-sample dy.
    const std::int64_t v = out.shape->back();
    softmax_rows(in[1].data, out.data, n / v, v, std::int64_t{0});
    for (std::int64_t r = 0; r < n / v; ++r) {
      out.data[r * v + static_cast<std::int64_t>(in[2].data[r])] -= T(1);
      for (std::int64_t i = 0; i < v; ++i) out.data[r * v + i] *= in[0].data[r];
    }
  } else {
    return unsupported(op);
  }
  return core::ok_status();
}

/// Top-k routing of a kMoeGate op (GShard, Lepikhin et al. 2021, without the random
/// second-expert drop): probabilities [g, s, e] to combine weights [g, s, e, c]. Per group,
/// round k = 1..top_k gives every token, in token order, its k-th most probable expert (ties:
/// the lower expert index) at the next free slot of that expert's `c`-slot buffer; a token
/// finding the buffer full is dropped for that expert. Weight: the expert's probability.
/// Calls `assign(flat index of [g, s, e], slot)` for every kept (token, expert) pair.
template <class T, class F>
core::Status moe_route(const ir::Op& gate, const View<T>& probs, std::int64_t capacity, F&& assign) {
  const Shape& ps = *probs.shape;
  const std::string& fn = gate.function;
  if (ps.size() != 3 || fn.rfind("top", 0) != 0) return unsupported(gate, "expected [groups, tokens, experts] and topK");
  const Shape& global = gate.out.shape;
  if (global.size() != 4 || global[1] != ps[1] || global[2] != ps[2] || global[3] != capacity) {
    return unsupported(gate, "routing with the token, expert or capacity axis split");
  }
  const std::int64_t top_k = std::stoll(fn.substr(3));
  const std::int64_t G = ps[0], S = ps[1], E = ps[2];
  std::vector<std::int64_t> order(static_cast<std::size_t>(E));
  std::vector<std::int64_t> ranked(static_cast<std::size_t>(S * E));
  for (std::int64_t gi = 0; gi < G; ++gi) {
    for (std::int64_t s = 0; s < S; ++s) {
      const T* p = probs.data + (gi * S + s) * E;
      for (std::int64_t e = 0; e < E; ++e) order[static_cast<std::size_t>(e)] = e;
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return p[a] > p[b]; });
      std::copy(order.begin(), order.end(), ranked.begin() + s * E);
    }
    std::vector<std::int64_t> used(static_cast<std::size_t>(E), 0);
    for (std::int64_t k = 0; k < std::min(top_k, E); ++k) {
      for (std::int64_t s = 0; s < S; ++s) {
        const std::int64_t e = ranked[static_cast<std::size_t>(s * E + k)];
        const std::int64_t slot = used[static_cast<std::size_t>(e)]++;
        if (slot < capacity) assign((gi * S + s) * E + e, slot);
      }
    }
  }
  return core::ok_status();
}

/// log Σ_i exp(x_i) of a row of w values, its largest value factored out (no exp overflows).
template <class T>
double row_log_sum_exp(const T* x, std::int64_t w) {
  const T mx = *std::max_element(x, x + w);
  double sum = 0;
  for (std::int64_t i = 0; i < w; ++i) sum += std::exp(x[i] - mx);
  return std::log(sum) + mx;
}

template <class T>
core::Status reduce(const ir::Graph& g, const ir::Op& op, const std::vector<View<T>>& in, View<T> out) {
  const std::string& fn = op.function;
  std::fill(out.data, out.data + out.size, T(0));
  if (fn == "softmax_cross_entropy") {
    const std::int64_t v = in[0].shape->back(), rows = in[0].size / v;
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* x = in[0].data + r * v;
      out.data[r] = static_cast<T>(row_log_sum_exp(x, v) - x[static_cast<std::int64_t>(in[1].data[r])]);
    }
    return core::ok_status();
  }
  if (fn == "norm_scale_grad") {
    const ir::NormType t = norm_of_source(g, op);
    const std::int64_t w = out.size, rows = in[1].size / w;
    std::vector<T> xh;
    xhat(t, in[1].data, rows, w, xh);
    for (std::int64_t j = 0; j < in[0].size; ++j) out.data[j % w] += in[0].data[j] * xh[static_cast<std::size_t>(j)];
    return core::ok_status();
  }
  if (fn == "moe_gate_grad") {
    // in = {d combine [g, s, e, c], probs [g, s, e]}: the routing is a constant (a
    // piecewise choice), so d prob = the sum of d combine over the slots it was written to.
    if (op.source == ir::kNoOp) return unsupported(op, "no forward gate");
    const std::int64_t c = in[0].shape->back();
    return moe_route(g.op(op.source), in[1], c, [&](std::int64_t i, std::int64_t slot) {
      out.data[i] += in[0].data[i * c + slot];
    });
  }
  if (fn != "sum" && fn != "mean") return unsupported(op);
  std::vector<std::int64_t> map;
  if (!reduce_map(*in[0].shape, *out.shape, map)) return unsupported(op, "unsupported reduction shape");
  std::vector<double> acc(static_cast<std::size_t>(out.size), 0.0);
  for (std::int64_t j = 0; j < in[0].size; ++j) acc[static_cast<std::size_t>(map[static_cast<std::size_t>(j)])] += in[0].data[j];
  const double f = fn == "mean" ? static_cast<double>(out.size) / static_cast<double>(in[0].size) : 1.0;
  for (std::int64_t j = 0; j < out.size; ++j) out.data[j] = static_cast<T>(acc[static_cast<std::size_t>(j)] * f);
  return core::ok_status();
}

template <class T>
void init_parameter(const ir::Op& op, View<T> out) {
  const init::ParameterInit p = parameter_init(op, *out.shape);
  // Computed in fp32 in both instantiations: the same initial values.
  for (std::int64_t i = 0; i < out.size; ++i) out.data[i] = static_cast<T>(init::parameter_value(p, i));
}

/// log Σ_p exp(lse_p) of row r of gathered statistics [parts, rows, 2] (LossStep), the
/// largest part's value factored out so no exp overflows.
template <class T>
double combined_log_sum_exp(const T* statistics, std::int64_t parts, std::int64_t rows, std::int64_t r) {
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t p = 0; p < parts; ++p) mx = std::max(mx, static_cast<double>(statistics[(p * rows + r) * 2]));
  double sum = 0;
  for (std::int64_t p = 0; p < parts; ++p) sum += std::exp(static_cast<double>(statistics[(p * rows + r) * 2]) - mx);
  return std::log(sum) + mx;
}

/// The steps of a cross entropy on a block of classes (exec::LossStep, Megatron-LM's
/// vocab_parallel_cross_entropy).
template <class T>
core::Status cross_entropy_on_class_block(const ir::Op& op, const std::vector<View<T>>& in, View<T> out,
                                          const KernelContext& ctx) {
  switch (ctx.loss_step) {
    case LossStep::kStatistics: {  // logits [rows, w], labels [rows] -> out [parts, rows, 2]
      if (in.size() != 2 || in[0].shape->empty() || out.shape->size() != 3) {
        return unsupported(op, "class-block statistics need logits, labels and a [parts, rows, 2] buffer");
      }
      const std::int64_t w = in[0].shape->back(), rows = in[0].size / w;
      if (in[1].size != rows || (*out.shape)[1] != rows || ctx.loss_part < 0 || ctx.loss_part >= (*out.shape)[0]) {
        return unsupported(op, "class-block statistics of another row count or part");
      }
      T* part = out.data + static_cast<std::int64_t>(ctx.loss_part) * rows * 2;
      for (std::int64_t r = 0; r < rows; ++r) {
        const T* x = in[0].data + r * w;
        const std::int64_t label = static_cast<std::int64_t>(in[1].data[r]) - ctx.first_class;
        part[2 * r] = static_cast<T>(row_log_sum_exp(x, w));
        part[2 * r + 1] = label >= 0 && label < w ? x[label] : T(0);
      }
      return core::ok_status();
    }
    case LossStep::kCombine: {  // statistics [parts, rows, 2] -> loss [rows]
      if (in.size() != 1 || in[0].shape->size() != 3 || (*in[0].shape)[1] != out.size) {
        return unsupported(op, "combining class-block statistics of another row count");
      }
      const std::int64_t parts = (*in[0].shape)[0], rows = out.size;
      for (std::int64_t r = 0; r < rows; ++r) {
        double label_logit = 0;
        for (std::int64_t p = 0; p < parts; ++p) label_logit += in[0].data[(p * rows + r) * 2 + 1];
        out.data[r] = static_cast<T>(combined_log_sum_exp(in[0].data, parts, rows, r) - label_logit);
      }
      return core::ok_status();
    }
    case LossStep::kGradient: {  // dy [rows], logits [rows, w], labels [rows], statistics -> dx [rows, w]
      if (in.size() != 4 || in[3].shape->size() != 3 || out.shape->empty()) {
        return unsupported(op, "a class-block gradient needs dy, logits, labels and the statistics");
      }
      const std::int64_t w = out.shape->back(), rows = out.size / w, parts = (*in[3].shape)[0];
      if (in[0].size != rows || in[1].size != out.size || in[2].size != rows || (*in[3].shape)[1] != rows) {
        return unsupported(op, "a class-block gradient of another row count");
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const double lse = combined_log_sum_exp(in[3].data, parts, rows, r);
        const std::int64_t label = static_cast<std::int64_t>(in[2].data[r]) - ctx.first_class;
        for (std::int64_t i = 0; i < w; ++i) {
          const double p = std::exp(static_cast<double>(in[1].data[r * w + i]) - lse) - (i == label ? 1.0 : 0.0);
          out.data[r * w + i] = static_cast<T>(in[0].data[r] * p);
        }
      }
      return core::ok_status();
    }
    case LossStep::kWhole: break;
  }
  return unsupported(op, "not a class-block step");
}

template <class T>
core::Status run_kernel(const ir::Graph& g, const ir::Op& op, const std::vector<View<T>>& in, View<T> out,
                        const KernelContext& ctx) {
  if (ctx.loss_step != LossStep::kWhole) return cross_entropy_on_class_block(op, in, out, ctx);
  switch (op.kind) {
    case ir::OpKind::kParameter:
      init_parameter(op, out);
      return core::ok_status();
    case ir::OpKind::kInput: {
      const std::uint64_t seed = name_hash(op.name);
      const std::int64_t per_sample = out.size / std::max<std::int64_t>(1, (*out.shape)[0]);
      const std::int64_t base = ctx.sample_offset * per_sample;
      for (std::int64_t i = 0; i < out.size; ++i) {
        out.data[i] = static_cast<T>(init::input_value(seed, base + i, op.out.is_index, ctx.index_range));
      }
      return core::ok_status();
    }
    case ir::OpKind::kDot:
    case ir::OpKind::kMoeDispatch:
    case ir::OpKind::kMoeCombine: return einsum(g, op, in, out);
    case ir::OpKind::kConv2d: {
      std::fill(out.data, out.data + out.size, T(0));
      const auto v = op.conv.variant;
      if (v == ir::ConvSpec::Variant::kForward) conv<T>(op.conv, in[0].data, in[1].data, nullptr, out.data);
      if (v == ir::ConvSpec::Variant::kGradInput) conv<T>(op.conv, nullptr, in[1].data, in[0].data, out.data);
      if (v == ir::ConvSpec::Variant::kGradFilter) conv<T>(op.conv, in[0].data, nullptr, in[1].data, out.data);
      return core::ok_status();
    }
    case ir::OpKind::kElementwise: return elementwise(g, op, in, out);
    case ir::OpKind::kReduce: return reduce(g, op, in, out);
    case ir::OpKind::kSoftmax: {
      const std::int64_t w = out.shape->back();
      const std::int64_t causal = is_causal_softmax(g, op) && out.shape->size() >= 2 &&
                                          (*out.shape)[out.shape->size() - 2] == w ? w : 0;
      softmax_rows(in[0].data, out.data, out.size / w, w, causal, attention_window_of(g, op));
      return core::ok_status();
    }
    case ir::OpKind::kNorm: {
      const ir::NormType t = norm_of_source(g, op);
      const std::int64_t w = out.shape->back(), rows = out.size / w;
      if (op.function.size() > 5 && op.function.ends_with("_grad")) {
        norm_grad(t, in[0].data, in[1].data, in[2].data, rows, w, out.data);
        return core::ok_status();
      }
      std::vector<T> xh;
      xhat(t, in[0].data, rows, w, xh);
      for (std::int64_t j = 0; j < out.size; ++j) {
        out.data[j] = xh[static_cast<std::size_t>(j)] * in[1].data[j % w] + (in.size() > 2 ? in[2].data[j % w] : T(0));
      }
      return core::ok_status();
    }
    case ir::OpKind::kEmbedding: {
      // The table's rows held here: [first, first + held); other ids look up zeros and add
      // nothing (a vocabulary-split table, summed over its devices afterwards).
      const bool lookup = op.function == "gather";
      const std::int64_t first = ctx.table_first_row;
      const std::int64_t held = ctx.table_rows >= 0 ? ctx.table_rows : (lookup ? in[0] : out).shape->front();
      auto local_row = [&](T id) {
        const auto row = static_cast<std::int64_t>(id) - first;
        return row >= 0 && row < held ? row : std::int64_t{-1};
      };
      if (lookup) {
        const std::int64_t w = in[0].shape->back();
        for (std::int64_t r = 0; r < in[1].size; ++r) {
          const std::int64_t row = local_row(in[1].data[r]);
          if (row < 0) std::fill(out.data + r * w, out.data + (r + 1) * w, T(0));
          else std::copy(in[0].data + row * w, in[0].data + (row + 1) * w, out.data + r * w);
        }
        return core::ok_status();
      }
      if (op.function == "scatter_add") {
        std::fill(out.data, out.data + out.size, T(0));
        const std::int64_t w = out.shape->back();
        for (std::int64_t r = 0; r < in[1].size; ++r) {
          const std::int64_t row = local_row(in[1].data[r]);
          if (row < 0) continue;
          for (std::int64_t i = 0; i < w; ++i) out.data[row * w + i] += in[0].data[r * w + i];
        }
        return core::ok_status();
      }
      return unsupported(op);
    }
    case ir::OpKind::kPool: return pool(g, op, in, out);
    case ir::OpKind::kMoeGate: {
      std::fill(out.data, out.data + out.size, T(0));
      return moe_route(op, in[0], out.shape->back(), [&](std::int64_t i, std::int64_t slot) {
        out.data[i * out.shape->back() + slot] = in[0].data[i];
      });
    }
    case ir::OpKind::kOptimizer: {
      // in = {parameter, gradient, state}; `out` is the parameter (updated in place).
      const std::int64_t n = out.size;
      T* st = in[2].data;
      const T* grad = in[1].data;
      if (op.function == "adam") {
        const T b1 = kAdamBeta1<T>, b2 = kAdamBeta2<T>;
        for (std::int64_t i = 0; i < n; ++i) {
          T& m = st[i];
          T& v = st[n + i];
          m = b1 * m + (1 - b1) * grad[i];
          v = b2 * v + (1 - b2) * grad[i] * grad[i];
          // Bias correction for step 1 (states start at zero every iteration).
          const T mh = m / (1 - b1), vh = v / (1 - b2);
          out.data[i] -= kAdamLr<T> * mh / (std::sqrt(vh) + kAdamEps<T>);
        }
        return core::ok_status();
      }
      if (op.function == "sgd_momentum") {
        for (std::int64_t i = 0; i < n; ++i) {
          st[i] = kSgdMomentum<T> * st[i] + grad[i];
          out.data[i] -= kSgdLr<T> * st[i];
        }
        return core::ok_status();
      }
      return unsupported(op);
    }
  }
  return unsupported(op);
}

}  // namespace

std::uint64_t name_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

init::ParameterInit parameter_init(const ir::Op& op, const std::vector<std::int64_t>& whole_shape) {
  init::ParameterInit p;
  p.seed = name_hash(op.name);
  p.scale = 0.1f;  // biases and shifts: small values
  const bool norm_scale = op.name.size() >= 6 && op.name.compare(op.name.size() - 6, 6, "_scale") == 0;
  if (norm_scale) {
    p.base = 1.0f;  // norm scales around 1
  } else if (whole_shape.size() >= 2) {
    p.scale = 1.0f / std::sqrt(static_cast<float>(product(whole_shape, 0, whole_shape.size() - 1)));  // ~1/sqrt(fan-in)
  }
  return p;
}

std::vector<std::int64_t> index_ranges(const ir::Graph& g) {
  std::vector<std::int64_t> range(g.size(), 0);
  for (const ir::Op& o : g.ops()) {
    if (o.kind == ir::OpKind::kEmbedding && o.inputs.size() == 2 && o.function == "gather") {
      range[static_cast<std::size_t>(o.inputs[1])] = g.op(o.inputs[0]).out.shape[0];
    }
    if (o.function == "softmax_cross_entropy") {
      range[static_cast<std::size_t>(o.inputs[1])] = g.op(o.inputs[0]).out.shape.back();
    }
  }
  return range;
}

bool reduction_index_map(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out,
                         std::vector<std::int64_t>& map) {
  return reduce_map(in, out, map);
}

void matmul(const float* lhs, const float* rhs, float* out, std::int64_t m, std::int64_t n, std::int64_t k) {
  matmul_t(lhs, rhs, out, m, n, k);
}

core::Status run_cpu_kernel(const ir::Graph& g, const ir::Op& op, const std::vector<TensorView>& in,
                            TensorView out, const KernelContext& ctx) {
  return run_kernel<float>(g, op, in, out, ctx);
}

core::Status run_cpu_kernel_f64(const ir::Graph& g, const ir::Op& op, const std::vector<TensorViewF64>& in,
                                TensorViewF64 out, const KernelContext& ctx) {
  return run_kernel<double>(g, op, in, out, ctx);
}

}  // namespace alpasim::exec::cpu
