#include "exec/cuda/exec_kernels.h"

#include <math.h>

#include "exec/cpu/init_values.h"

namespace alpasim::exec::cuda::kernels {
namespace {

constexpr int kThreads = 256;
constexpr float kEps = 1e-5f;

// One block per row (or channel), at most 2^20 blocks (the kernels loop over the rest).
inline unsigned row_blocks(i64 rows) { return static_cast<unsigned>(rows < 1 ? 1 : (rows > (1 << 20) ? (1 << 20) : rows)); }

inline unsigned blocks(i64 n) {
  const i64 b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

#define GRID_LOOP(i, n) for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<i64>(blockDim.x) * gridDim.x)

__device__ float gelu_f(float x) {
  const float k = 0.7978845608f;
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__device__ float gelu_grad_f(float x) {
  const float k = 0.7978845608f;
  const float t = tanhf(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void gather_k(float* d, const float* s, const i64* idx, i64 n) { GRID_LOOP(i, n) d[i] = s[idx[i]]; }
__global__ void scatter_k(float* d, const float* s, const i64* idx, i64 n) { GRID_LOOP(i, n) d[idx[i]] = s[i]; }
__global__ void strided_copy_k(float* d, const float* s, StridedBox box, float scale, i64 n) {
  GRID_LOOP(i, n) {
    i64 rest = i, si = 0, di = 0;
    for (int a = box.axes - 1; a >= 0; --a) {  // innermost axis fastest: coalesced runs
      const i64 x = rest % box.extent[a];
      rest /= box.extent[a];
      si += x * box.src_stride[a];
      di += x * box.dst_stride[a];
    }
    d[di] = scale * s[si];
  }
}
__global__ void fill_k(float* d, float v, i64 n) { GRID_LOOP(i, n) d[i] = v; }
__global__ void init_parameter_k(float* d, i64 n, exec::init::ParameterInit p, InitBlock b) {
  GRID_LOOP(i, n) {
    i64 whole = i;
    if (b.axes > 0) {
      i64 rest = i;
      whole = 0;
      for (int a = b.axes - 1; a >= 0; --a) {
        const i64 x = rest % b.shape[a];
        rest /= b.shape[a];
        whole += (x + b.offset[a]) * b.whole_stride[a];
      }
    }
    d[i] = exec::init::parameter_value(p, whole);
  }
}
__global__ void init_input_k(float* d, i64 n, unsigned long long seed, i64 first, int is_index, i64 range) {
  GRID_LOOP(i, n) d[i] = exec::init::input_value(seed, first + i, is_index != 0, range);
}
__global__ void axpby_k(float* d, float a, const float* s, float b, i64 n, i64 sn) {
  GRID_LOOP(i, n) d[i] = a * d[i] + (s ? b * s[i % sn] : 0.0f);
}
__global__ void pointwise_k(int fn, float* o, const float* a, i64 an, const float* b, i64 bn, i64 n) {
  GRID_LOOP(i, n) {
    const float x = a[i % an];
    const float y = b ? b[i % bn] : 0.0f;
    switch (fn) {
      case 0: o[i] = x + y; break;
      case 1: o[i] = x * y; break;
      case 2: o[i] = gelu_f(x); break;
      case 3: o[i] = x * gelu_grad_f(y); break;
      case 4: o[i] = x > 0.0f ? x : 0.0f; break;
      case 6: o[i] = x > 0.0f ? x * x : 0.0f; break;           // squared_relu
      case 7: o[i] = y > 0.0f ? 2.0f * y * x : 0.0f; break;    // squared_relu_grad: dy = x
      default: o[i] = y > 0.0f ? x : 0.0f; break;
    }
  }
}
// Reductions accumulate in double, as the CPU backend does: a bias or batch-norm shift
// gradient is a sum of 10^3-10^6 terms that largely cancel, and fp32 atomics left it
// thousands of tolerances from the CPU's (validation/gpu/README.md run 4).
__global__ void reduce_map_k(double* acc, const float* in, const i64* map, i64 n) {
  GRID_LOOP(i, n) atomicAdd(acc + map[i], static_cast<double>(in[i]));
}
__global__ void scale_to_float_k(float* o, const double* acc, double f, i64 n) {
  GRID_LOOP(i, n) o[i] = static_cast<float>(acc[i] * f);
}
__global__ void broadcast_map_k(float* o, const float* in, const i64* map, float f, i64 n) {
  GRID_LOOP(i, n) o[i] = f * in[map[i]];
}
// Row kernels run one block per row (rows of a GPT layer are 10^3-10^5 wide), batch-norm
// kernels one block per channel; sums are in double, as the CPU backend's.
// Sum over the block (blockDim.x a multiple of 32); every thread gets the total.
__device__ double block_sum(double v) {
  __shared__ double part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // the previous call's readers of part[0] are done
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>((blockDim.x + 31) >> 5);
  v = static_cast<int>(threadIdx.x) < warps ? part[threadIdx.x] : 0.0;
  if (warp == 0) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) part[0] = v;
  }
  __syncthreads();
  return part[0];
}
// Maximum over the block; every thread gets it.
__device__ float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>((blockDim.x + 31) >> 5);
  v = static_cast<int>(threadIdx.x) < warps ? part[threadIdx.x] : -INFINITY;
  if (warp == 0) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) part[0] = v;
  }
  __syncthreads();
  return part[0];
}
#define BLOCK_LOOP(r, n) for (i64 r = blockIdx.x; r < (n); r += gridDim.x)
#define THREAD_LOOP(i, n) for (i64 i = threadIdx.x; i < (n); i += blockDim.x)

__global__ void softmax_k(float* y, const float* x, i64 rows, i64 w, i64 causal, i64 window) {
  BLOCK_LOOP(r, rows) {
    const i64 lim = causal > 0 ? (r % causal) + 1 : w;
    const i64 first = causal > 0 && window > 0 && lim > window ? lim - window : 0;
    const float* xr = x + r * w;
    float* yr = y + r * w;
    float mx = -INFINITY;
    THREAD_LOOP(i, lim) {
      if (i >= first) mx = fmaxf(mx, xr[i]);
    }
    mx = block_max(mx);
    double sum = 0;
    THREAD_LOOP(i, w) {
      yr[i] = i >= first && i < lim ? expf(xr[i] - mx) : 0.0f;
      sum += yr[i];
    }
    sum = block_sum(sum);
    THREAD_LOOP(i, w) yr[i] = static_cast<float>(yr[i] / sum);  // this thread's own elements
  }
}
__global__ void softmax_grad_k(float* dx, const float* dy, const float* y, i64 rows, i64 w) {
  BLOCK_LOOP(r, rows) {
    double dot = 0;
    THREAD_LOOP(i, w) dot += dy[r * w + i] * y[r * w + i];
    dot = block_sum(dot);
    THREAD_LOOP(i, w) dx[r * w + i] = static_cast<float>(y[r * w + i] * (dy[r * w + i] - dot));
  }
}
__device__ void row_stats(const float* x, i64 w, int rms, float* mean, float* inv) {
  double s = 0, q = 0;
  THREAD_LOOP(i, w) {
    s += x[i];
    q += static_cast<double>(x[i]) * x[i];
  }
  s = block_sum(s);
  q = block_sum(q);
  const double m = rms ? 0.0 : s / w;
  const double v = q / w - m * m;
  *mean = static_cast<float>(m);
  *inv = static_cast<float>(1.0 / sqrt((v > 0 ? v : 0) + kEps));
}
__global__ void layer_norm_k(float* y, const float* x, const float* g, const float* b, i64 rows, i64 w, int rms) {
  BLOCK_LOOP(r, rows) {
    float m, inv;
    row_stats(x + r * w, w, rms, &m, &inv);
    THREAD_LOOP(i, w) y[r * w + i] = (x[r * w + i] - m) * inv * g[i] + (b ? b[i] : 0.0f);
  }
}
__global__ void layer_norm_grad_k(float* dx, const float* dy, const float* x, const float* g, i64 rows, i64 w,
                                  int rms) {
  BLOCK_LOOP(r, rows) {
    float m, inv;
    row_stats(x + r * w, w, rms, &m, &inv);
    double sd = 0, sdx = 0;
    THREAD_LOOP(i, w) {
      const double d = dy[r * w + i] * g[i];
      sd += d;
      sdx += d * (x[r * w + i] - m) * inv;
    }
    sd = block_sum(sd);
    sdx = block_sum(sdx);
    const double md = rms ? 0.0 : sd / w, mdx = sdx / w;
    THREAD_LOOP(i, w) {
      const double d = dy[r * w + i] * g[i];
      dx[r * w + i] = static_cast<float>(inv * (d - md - (x[r * w + i] - m) * inv * mdx));
    }
  }
}
// The scale gradient sums over rows: the rows' statistics first (one block per row), then one
// thread per column.
__global__ void row_stats_k(float* stats, const float* x, i64 rows, i64 w, int rms) {
  BLOCK_LOOP(r, rows) {
    float m, inv;
    row_stats(x + r * w, w, rms, &m, &inv);
    if (threadIdx.x == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = inv;
    }
  }
}
// The layer-norm scale gradient is a column sum over rows, in two passes so that every SM
// works (one thread per column left all but w/256 SMs idle: 63 ms of a GPT 1.3B iteration
// on an H200, validation/gpu/README.md run 4). Pass 1: block (32, 8) sums 32 adjacent
// columns (coalesced) over one chunk of rows; pass 2 adds the chunks' partials per column in
// chunk order (deterministic).
constexpr int kColTile = 32, kRowLanes = 8;
__global__ void layer_norm_scale_grad_partial_k(double* part, const float* dy, const float* x, const float* stats,
                                                i64 rows, i64 w, i64 rows_per_chunk) {
  const i64 c = blockIdx.x * static_cast<i64>(kColTile) + threadIdx.x;
  const i64 r0 = blockIdx.y * rows_per_chunk;
  const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  double acc = 0;
  if (c < w) {
    for (i64 r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += dy[r * w + c] * (x[r * w + c] - stats[2 * r]) * stats[2 * r + 1];
  }
  __shared__ double lane_sum[kRowLanes][kColTile + 1];
  lane_sum[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < w) {
    double total = 0;
    for (int k = 0; k < kRowLanes; ++k) total += lane_sum[k][threadIdx.x];
    part[blockIdx.y * w + c] = total;
  }
}
__global__ void sum_partials_k(float* dg, const double* part, i64 chunks, i64 w) {
  GRID_LOOP(c, w) {
    double total = 0;
    for (i64 k = 0; k < chunks; ++k) total += part[k * w + c];
    dg[c] = static_cast<float>(total);
  }
}
// Batch norm: one block per channel, statistics over the rows (strided by the width).
__device__ void channel_stats(const float* x, i64 rows, i64 w, i64 c, float* mean, float* inv) {
  double s = 0, q = 0;
  THREAD_LOOP(r, rows) {
    const double v = x[r * w + c];
    s += v;
    q += v * v;
  }
  s = block_sum(s);
  q = block_sum(q);
  const double m = s / rows;
  const double var = q / rows - m * m;
  *mean = static_cast<float>(m);
  *inv = static_cast<float>(1.0 / sqrt((var > 0 ? var : 0) + kEps));
}
__global__ void batch_norm_k(float* y, const float* x, const float* g, const float* b, i64 rows, i64 w) {
  BLOCK_LOOP(c, w) {
    float m, inv;
    channel_stats(x, rows, w, c, &m, &inv);
    THREAD_LOOP(r, rows) y[r * w + c] = (x[r * w + c] - m) * inv * g[c] + (b ? b[c] : 0.0f);
  }
}
__global__ void batch_norm_grad_k(float* dx, const float* dy, const float* x, const float* g, i64 rows, i64 w) {
  BLOCK_LOOP(c, w) {
    float m, inv;
    channel_stats(x, rows, w, c, &m, &inv);
    double sd = 0, sdx = 0;
    THREAD_LOOP(r, rows) {
      const double d = dy[r * w + c] * g[c];
      sd += d;
      sdx += d * (x[r * w + c] - m) * inv;
    }
    sd = block_sum(sd);
    sdx = block_sum(sdx);
    const double md = sd / rows, mdx = sdx / rows;
    THREAD_LOOP(r, rows) {
      const double d = dy[r * w + c] * g[c];
      dx[r * w + c] = static_cast<float>(inv * (d - md - (x[r * w + c] - m) * inv * mdx));
    }
  }
}
__global__ void batch_norm_scale_grad_k(float* dg, const float* dy, const float* x, i64 rows, i64 w) {
  BLOCK_LOOP(c, w) {
    float m, inv;
    channel_stats(x, rows, w, c, &m, &inv);
    double acc = 0;
    THREAD_LOOP(r, rows) acc += dy[r * w + c] * (x[r * w + c] - m) * inv;
    acc = block_sum(acc);
    if (threadIdx.x == 0) dg[c] = static_cast<float>(acc);
  }
}
// Max pooling: one thread per output element; the argmax loop is the CPU backend's.
__device__ i64 pool_argmax(const float* x, i64 yi, i64 h, i64 w, i64 c, i64 k, i64 st, i64 pt, i64 pl, i64 ho,
                           i64 wo) {
  const i64 ch = yi % c, ox = (yi / c) % wo, oy = (yi / (c * wo)) % ho, n = yi / (c * wo * ho);
  float best = -INFINITY;
  i64 arg = -1;
  for (i64 ky = 0; ky < k; ++ky) {
    const i64 iy = oy * st + ky - pt;
    if (iy < 0 || iy >= h) continue;
    for (i64 kx = 0; kx < k; ++kx) {
      const i64 ix = ox * st + kx - pl;
      if (ix < 0 || ix >= w) continue;
      const i64 xi = ((n * h + iy) * w + ix) * c + ch;
      if (x[xi] > best) {
        best = x[xi];
        arg = xi;
      }
    }
  }
  return arg;
}
__global__ void max_pool_k(float* y, const float* x, i64 n, i64 h, i64 w, i64 c, i64 k, i64 st, i64 pt, i64 pl,
                           i64 ho, i64 wo) {
  GRID_LOOP(yi, n * ho * wo * c) {
    const i64 arg = pool_argmax(x, yi, h, w, c, k, st, pt, pl, ho, wo);
    y[yi] = arg >= 0 ? x[arg] : -INFINITY;
  }
}
__global__ void max_pool_grad_k(float* dx, const float* dy, const float* x, i64 n, i64 h, i64 w, i64 c, i64 k,
                                i64 st, i64 pt, i64 pl, i64 ho, i64 wo) {
  GRID_LOOP(yi, n * ho * wo * c) {
    const i64 arg = pool_argmax(x, yi, h, w, c, k, st, pt, pl, ho, wo);
    if (arg >= 0) atomicAdd(dx + arg, dy[yi]);
  }
}
// A row's largest value and Σ exp(x − max) over the block's threads (every thread of the
// block must call it: block reductions).
struct RowExpSum {
  float max;
  double sum;
};
__device__ RowExpSum row_exp_sum(const float* xr, i64 w) {
  float mx = -INFINITY;
  THREAD_LOOP(i, w) mx = fmaxf(mx, xr[i]);
  mx = block_max(mx);
  double s = 0;
  THREAD_LOOP(i, w) s += expf(xr[i] - mx);
  return {mx, block_sum(s)};
}
__global__ void ce_k(float* o, const float* x, const float* lab, i64 rows, i64 w) {
  BLOCK_LOOP(r, rows) {
    const float* xr = x + r * w;
    const RowExpSum e = row_exp_sum(xr, w);
    if (threadIdx.x == 0) o[r] = static_cast<float>(log(e.sum) + e.max - xr[static_cast<i64>(lab[r])]);
  }
}
__global__ void ce_grad_k(float* dx, const float* dy, const float* x, const float* lab, i64 rows, i64 w) {
  BLOCK_LOOP(r, rows) {
    const float* xr = x + r * w;
    const RowExpSum e = row_exp_sum(xr, w);
    const float mx = e.max;
    const double s = e.sum;
    THREAD_LOOP(i, w) {
      const float p = static_cast<float>(expf(xr[i] - mx) / s) - (i == static_cast<i64>(lab[r]) ? 1.0f : 0.0f);
      dx[r * w + i] = dy[r] * p;
    }
  }
}
// The steps of a cross entropy on a block of classes (exec::LossStep), as the CPU backend.
__global__ void ce_block_statistics_k(float* part, const float* x, const float* lab, i64 rows, i64 w,
                                      i64 first) {
  BLOCK_LOOP(r, rows) {
    const float* xr = x + r * w;
    const RowExpSum e = row_exp_sum(xr, w);
    if (threadIdx.x == 0) {
      const i64 label = static_cast<i64>(lab[r]) - first;
      part[2 * r] = static_cast<float>(log(e.sum) + e.max);
      part[2 * r + 1] = label >= 0 && label < w ? xr[label] : 0.0f;
    }
  }
}
__device__ double combined_lse(const float* st, i64 parts, i64 rows, i64 r) {
  double mx = -INFINITY;
  for (i64 p = 0; p < parts; ++p) mx = fmax(mx, static_cast<double>(st[(p * rows + r) * 2]));
  double s = 0;
  for (i64 p = 0; p < parts; ++p) s += exp(static_cast<double>(st[(p * rows + r) * 2]) - mx);
  return log(s) + mx;
}
__global__ void ce_combine_k(float* o, const float* st, i64 parts, i64 rows) {
  GRID_LOOP(r, rows) {
    double label = 0;
    for (i64 p = 0; p < parts; ++p) label += st[(p * rows + r) * 2 + 1];
    o[r] = static_cast<float>(combined_lse(st, parts, rows, r) - label);
  }
}
__global__ void ce_block_grad_k(float* dx, const float* dy, const float* x, const float* lab, const float* st,
                                i64 parts, i64 rows, i64 w, i64 first) {
  BLOCK_LOOP(r, rows) {
    const double lse = combined_lse(st, parts, rows, r);
    const i64 label = static_cast<i64>(lab[r]) - first;
    THREAD_LOOP(i, w) {
      const double p = exp(static_cast<double>(x[r * w + i]) - lse) - (i == label ? 1.0 : 0.0);
      dx[r * w + i] = static_cast<float>(dy[r] * p);
    }
  }
}
__global__ void embedding_k(float* o, const float* t, const float* ids, i64 rows, i64 w, i64 first, i64 held) {
  GRID_LOOP(i, rows * w) {
    const i64 row = static_cast<i64>(ids[i / w]) - first;
    o[i] = row >= 0 && row < held ? t[row * w + i % w] : 0.0f;
  }
}
__global__ void embedding_grad_k(float* g, const float* dy, const float* ids, i64 rows, i64 w, i64 first,
                                 i64 held) {
  GRID_LOOP(i, rows * w) {
    const i64 row = static_cast<i64>(ids[i / w]) - first;
    if (row >= 0 && row < held) atomicAdd(g + row * w + i % w, dy[i]);
  }
}
__global__ void adam_k(float* w, const float* g, float* st, i64 n) {
  GRID_LOOP(i, n) {
    float& m = st[i];
    float& v = st[n + i];
    m = 0.9f * m + 0.1f * g[i];
    v = 0.999f * v + 0.001f * g[i] * g[i];
    const float mh = m / 0.1f, vh = v / 0.001f;
    w[i] -= 1e-3f * mh / (sqrtf(vh) + 1e-8f);
  }
}
__global__ void sgd_k(float* w, const float* g, float* st, i64 n) {
  GRID_LOOP(i, n) {
    st[i] = 0.9f * st[i] + g[i];
    w[i] -= 1e-2f * st[i];
  }
}

}  // namespace

cudaError_t gather(float* d, const float* s, const i64* idx, i64 n, cudaStream_t st) {
  gather_k<<<blocks(n), kThreads, 0, st>>>(d, s, idx, n);
  return cudaGetLastError();
}
cudaError_t scatter(float* d, const float* s, const i64* idx, i64 n, cudaStream_t st) {
  scatter_k<<<blocks(n), kThreads, 0, st>>>(d, s, idx, n);
  return cudaGetLastError();
}
cudaError_t strided_copy(float* d, const float* s, const StridedBox& box, float scale, cudaStream_t st) {
  i64 n = box.axes > 0 ? 1 : 0;
  for (int a = 0; a < box.axes; ++a) n *= box.extent[a];
  if (n == 0) return cudaSuccess;
  strided_copy_k<<<blocks(n), kThreads, 0, st>>>(d, s, box, scale, n);
  return cudaGetLastError();
}
cudaError_t init_parameter(float* d, i64 n, unsigned long long seed, float base, float scale, const InitBlock& b,
                           cudaStream_t st) {
  exec::init::ParameterInit p;
  p.seed = seed;
  p.base = base;
  p.scale = scale;
  init_parameter_k<<<blocks(n), kThreads, 0, st>>>(d, n, p, b);
  return cudaGetLastError();
}

cudaError_t init_input(float* d, i64 n, unsigned long long seed, i64 first, int is_index, i64 range, cudaStream_t st) {
  init_input_k<<<blocks(n), kThreads, 0, st>>>(d, n, seed, first, is_index, range);
  return cudaGetLastError();
}

cudaError_t fill(float* d, float v, i64 n, cudaStream_t st) {
  fill_k<<<blocks(n), kThreads, 0, st>>>(d, v, n);
  return cudaGetLastError();
}
cudaError_t axpby(float* d, float a, const float* s, float b, i64 n, i64 sn, cudaStream_t st) {
  axpby_k<<<blocks(n), kThreads, 0, st>>>(d, a, s, b, n, sn);
  return cudaGetLastError();
}
cudaError_t pointwise(int fn, float* o, const float* a, i64 an, const float* b, i64 bn, i64 n, cudaStream_t st) {
  pointwise_k<<<blocks(n), kThreads, 0, st>>>(fn, o, a, an, b, bn, n);
  return cudaGetLastError();
}
cudaError_t reduce_map(float* o, const float* in, const i64* map, double f, i64 n, i64 out_n, cudaStream_t st) {
  void* acc = nullptr;
  if (cudaError_t e = cudaMallocAsync(&acc, static_cast<size_t>(out_n > 0 ? out_n : 1) * sizeof(double), st);
      e != cudaSuccess) {
    return e;
  }
  cudaError_t e = cudaMemsetAsync(acc, 0, static_cast<size_t>(out_n > 0 ? out_n : 1) * sizeof(double), st);
  if (e == cudaSuccess) {
    reduce_map_k<<<blocks(n), kThreads, 0, st>>>(static_cast<double*>(acc), in, map, n);
    scale_to_float_k<<<blocks(out_n), kThreads, 0, st>>>(o, static_cast<const double*>(acc), f, out_n);
    e = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(acc, st);  // also when a launch failed
  return e != cudaSuccess ? e : freed;
}
cudaError_t broadcast_map(float* o, const float* in, const i64* map, float f, i64 n, cudaStream_t st) {
  broadcast_map_k<<<blocks(n), kThreads, 0, st>>>(o, in, map, f, n);
  return cudaGetLastError();
}
cudaError_t softmax(float* y, const float* x, i64 rows, i64 w, i64 causal, i64 window, cudaStream_t st) {
  softmax_k<<<row_blocks(rows), kThreads, 0, st>>>(y, x, rows, w, causal, window);
  return cudaGetLastError();
}
cudaError_t softmax_grad(float* dx, const float* dy, const float* y, i64 rows, i64 w, cudaStream_t st) {
  softmax_grad_k<<<row_blocks(rows), kThreads, 0, st>>>(dx, dy, y, rows, w);
  return cudaGetLastError();
}
cudaError_t layer_norm(float* y, const float* x, const float* g, const float* b, i64 rows, i64 w, int rms,
                       cudaStream_t st) {
  layer_norm_k<<<row_blocks(rows), kThreads, 0, st>>>(y, x, g, b, rows, w, rms);
  return cudaGetLastError();
}
cudaError_t layer_norm_grad(float* dx, const float* dy, const float* x, const float* g, i64 rows, i64 w, int rms,
                            cudaStream_t st) {
  layer_norm_grad_k<<<row_blocks(rows), kThreads, 0, st>>>(dx, dy, x, g, rows, w, rms);
  return cudaGetLastError();
}
cudaError_t layer_norm_scale_grad(float* dg, const float* dy, const float* x, i64 rows, i64 w, int rms,
                                  cudaStream_t st) {
  void* stats = nullptr;  // (mean, 1/std) per row
  if (cudaError_t e = cudaMallocAsync(&stats, static_cast<size_t>(2 * (rows > 0 ? rows : 1)) * sizeof(float), st);
      e != cudaSuccess) {
    return e;
  }
  // Chunks of at least 64 rows, at most 256 chunks (the partials: chunks x w doubles).
  const i64 chunks = rows < 64 ? 1 : ((rows + 63) / 64 > 256 ? 256 : (rows + 63) / 64);
  const i64 rows_per_chunk = rows < 1 ? 1 : (rows + chunks - 1) / chunks;
  void* part = nullptr;
  if (cudaError_t e = cudaMallocAsync(&part, static_cast<size_t>(chunks * (w > 0 ? w : 1)) * sizeof(double), st);
      e != cudaSuccess) {
    (void)cudaFreeAsync(stats, st);
    return e;
  }
  row_stats_k<<<row_blocks(rows), kThreads, 0, st>>>(static_cast<float*>(stats), x, rows, w, rms);
  const dim3 grid(static_cast<unsigned>((w + kColTile - 1) / kColTile > 0 ? (w + kColTile - 1) / kColTile : 1),
                  static_cast<unsigned>(chunks));
  layer_norm_scale_grad_partial_k<<<grid, dim3(kColTile, kRowLanes), 0, st>>>(
      static_cast<double*>(part), dy, x, static_cast<const float*>(stats), rows, w, rows_per_chunk);
  sum_partials_k<<<blocks(w), kThreads, 0, st>>>(dg, static_cast<const double*>(part), chunks, w);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t freed_part = cudaFreeAsync(part, st);  // also when a launch failed
  const cudaError_t freed = cudaFreeAsync(stats, st);
  return launched != cudaSuccess ? launched : (freed_part != cudaSuccess ? freed_part : freed);
}
cudaError_t batch_norm(float* y, const float* x, const float* g, const float* b, i64 rows, i64 w, cudaStream_t st) {
  batch_norm_k<<<row_blocks(w), kThreads, 0, st>>>(y, x, g, b, rows, w);
  return cudaGetLastError();
}
cudaError_t batch_norm_grad(float* dx, const float* dy, const float* x, const float* g, i64 rows, i64 w,
                            cudaStream_t st) {
  batch_norm_grad_k<<<row_blocks(w), kThreads, 0, st>>>(dx, dy, x, g, rows, w);
  return cudaGetLastError();
}
cudaError_t batch_norm_scale_grad(float* dg, const float* dy, const float* x, i64 rows, i64 w, cudaStream_t st) {
  batch_norm_scale_grad_k<<<row_blocks(w), kThreads, 0, st>>>(dg, dy, x, rows, w);
  return cudaGetLastError();
}
cudaError_t max_pool(float* y, const float* x, i64 n, i64 h, i64 w, i64 c, i64 k, i64 s, i64 pt, i64 pl, i64 ho,
                     i64 wo, cudaStream_t st) {
  max_pool_k<<<blocks(n * ho * wo * c), kThreads, 0, st>>>(y, x, n, h, w, c, k, s, pt, pl, ho, wo);
  return cudaGetLastError();
}
cudaError_t max_pool_grad(float* dx, const float* dy, const float* x, i64 n, i64 h, i64 w, i64 c, i64 k, i64 s,
                          i64 pt, i64 pl, i64 ho, i64 wo, cudaStream_t st) {
  max_pool_grad_k<<<blocks(n * ho * wo * c), kThreads, 0, st>>>(dx, dy, x, n, h, w, c, k, s, pt, pl, ho, wo);
  return cudaGetLastError();
}
cudaError_t cross_entropy(float* o, const float* x, const float* lab, i64 rows, i64 w, cudaStream_t st) {
  ce_k<<<row_blocks(rows), kThreads, 0, st>>>(o, x, lab, rows, w);
  return cudaGetLastError();
}
cudaError_t cross_entropy_grad(float* dx, const float* dy, const float* x, const float* lab, i64 rows, i64 w,
                               cudaStream_t st) {
  ce_grad_k<<<row_blocks(rows), kThreads, 0, st>>>(dx, dy, x, lab, rows, w);
  return cudaGetLastError();
}
cudaError_t cross_entropy_block_statistics(float* part, const float* x, const float* lab, i64 rows, i64 w,
                                           i64 first, cudaStream_t st) {
  ce_block_statistics_k<<<row_blocks(rows), kThreads, 0, st>>>(part, x, lab, rows, w, first);
  return cudaGetLastError();
}
cudaError_t cross_entropy_combine(float* o, const float* statistics, i64 parts, i64 rows, cudaStream_t st) {
  ce_combine_k<<<blocks(rows), kThreads, 0, st>>>(o, statistics, parts, rows);
  return cudaGetLastError();
}
cudaError_t cross_entropy_block_grad(float* dx, const float* dy, const float* x, const float* lab,
                                     const float* statistics, i64 parts, i64 rows, i64 w, i64 first,
                                     cudaStream_t st) {
  ce_block_grad_k<<<row_blocks(rows), kThreads, 0, st>>>(dx, dy, x, lab, statistics, parts, rows, w, first);
  return cudaGetLastError();
}
cudaError_t embedding(float* o, const float* t, const float* ids, i64 rows, i64 w, i64 first, i64 held,
                      cudaStream_t st) {
  embedding_k<<<blocks(rows * w), kThreads, 0, st>>>(o, t, ids, rows, w, first, held);
  return cudaGetLastError();
}
cudaError_t embedding_grad(float* g, const float* dy, const float* ids, i64 rows, i64 w, i64 first, i64 held,
                           cudaStream_t st) {
  embedding_grad_k<<<blocks(rows * w), kThreads, 0, st>>>(g, dy, ids, rows, w, first, held);
  return cudaGetLastError();
}
cudaError_t adam(float* w, const float* g, float* s, i64 n, cudaStream_t st) {
  adam_k<<<blocks(n), kThreads, 0, st>>>(w, g, s, n);
  return cudaGetLastError();
}
cudaError_t sgd_momentum(float* w, const float* g, float* s, i64 n, cudaStream_t st) {
  sgd_k<<<blocks(n), kThreads, 0, st>>>(w, g, s, n);
  return cudaGetLastError();
}

}  // namespace alpasim::exec::cuda::kernels
