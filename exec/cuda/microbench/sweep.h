#pragma once

// What alpa-profile measures: the shape lists, message sizes and nccl-tests conventions.
// Plain C++ (no CUDA types), so the plan of a sweep is unit-tested on any machine.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "schema/profile.h"

namespace alpasim::exec::microbench {

/// Which families of microbenchmarks to run (`--ops gemm,conv,hbm,nccl`).
struct OpSelection {
  bool gemm = false;  ///< cuBLASLt GEMMs
  bool conv = false;  ///< cuDNN convolutions
  bool hbm = false;   ///< HBM streaming kernels
  bool nccl = false;  ///< NCCL collectives
};

/// Parses "gemm,conv,hbm,nccl" (any subset, any order, no repeats). Error text:
/// `--ops: unknown operator family "x" (expected gemm, conv, hbm or nccl)`.
core::Result<OpSelection> parse_op_selection(const std::string& text);

/// Why a GEMM shape is in the sweep; the name is written into each entry's citation as
/// `set=<name>` so calibration reports can group held-out errors.
enum class GemmSet {
  kGrid,     ///< the fitting grid: M, N, K each from a power-of-two ladder (role fit)
  kRandom,   ///< held out: log-uniform random M, N, K off the grid (role check)
  kTpSkinny, ///< held out: transformer GEMMs with N or K divided by the tensor-parallel degree
  kBatched,  ///< held out: attention score/context batched GEMMs (role check)
};
/// "grid", "random", "tp_skinny", "batched".
const char* gemm_set_name(GemmSet s);

/// One GEMM to time: C[batch, m, n] = A[batch, m, k] B[batch, k, n].
struct GemmCase {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;           ///< C[batch, m, n] += A[m, k] B[k, n]
  core::DType dtype = core::DType::kBf16;                ///< operand type
  GemmSet set = GemmSet::kGrid;                          ///< why it is in the sweep
  schema::ProfileRole role = schema::ProfileRole::kFit;  ///< fit (grid) or check (held out)
};

/// The GEMM sweep for `dtypes`: the grid (fit), then per dtype the held-out random,
/// tensor-parallel and batched shapes (check), all inside the grid's range (m x batch for
/// batched shapes) so the cost model can interpolate them. `quick` uses a 3-point ladder and
/// fewer held-out shapes (about a minute on one H100 with the other families). Deterministic: the
/// random shapes come from std::mt19937_64 seeded with `seed` and this file's own
/// log-uniform mapping. No held-out shape lies on the grid: every random dimension is a
/// multiple of 64 that is not a power of two, so no (m, n, k) of the random set is a grid point.
std::vector<GemmCase> gemm_sweep(const std::vector<core::DType>& dtypes, bool quick,
                                 std::uint64_t seed);

/// The grid ladder of GEMM dimensions (powers of two, 128 .. 16384; quick: 128, 1024, 8192).
std::vector<std::int64_t> gemm_grid_ladder(bool quick);

/// One cuDNN forward convolution (NCHW), a layer of an Alpa Wide-ResNet config.
struct ConvCase {
  std::int64_t batch = 0, in_channels = 0, out_channels = 0, height = 0, width = 0;  ///< NCHW
  std::int64_t kernel = 0, stride = 1, padding = 0;  ///< square kernel, SAME-style padding k/2
  core::DType dtype = core::DType::kFp16;            ///< fp16 (tensor cores) or fp32 (FMA)
  std::string source;  ///< e.g. "wresnet-1B stage2 conv2"
  schema::ProfileRole role = schema::ProfileRole::kFit;  ///< check: only in held-out configs
};

/// The distinct convolution layers of the Alpa paper's Wide-ResNet configs (table 8: 250M,
/// 1B, 2B, 4B, 6.8B, 13B; 224x224 images; bottleneck blocks as ir::build_wide_resnet) at
/// `batch` images. Layers of the 2B and 6.8B configs not shared with the others are check
/// rows; the rest fit. `quick`: the 250M and 1B configs only.
std::vector<ConvCase> conv_sweep(std::int64_t batch, core::DType dtype, bool quick);

/// NCCL message sizes in bytes: powers of two from 1 KiB to `max_bytes` (4 GiB full sweep,
/// quick: 1 KiB .. 256 MiB in steps of 4x).
std::vector<std::int64_t> nccl_sizes(std::int64_t max_bytes, bool quick);

/// The nccl-tests bus-bandwidth factor (doc/PERFORMANCE.md of nccl-tests): all_reduce
/// 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast and send_recv 1.
double busbw_factor(const std::string& collective, std::int64_t n);

/// A group of ranks to measure collectives on (ranks are global, in order).
struct GroupPlacement {
  std::vector<int> ranks;      ///< global ranks, ascending
  std::int64_t num_nodes = 1;  ///< nodes the group spans
  std::string placement;  ///< "contiguous", "strided" or "one-per-node"
  schema::ProfileRole role = schema::ProfileRole::kFit;  ///< contiguous fit, other placements check
};

/// Every group size 2..world and placement: contiguous ranks within a node (fit), strided
/// ranks within a node (check: same count, other GPUs, so a topology-blind fit is checked),
/// and across nodes the same number of GPUs per node on every node (fit) plus one GPU per
/// node (check). `host_of_rank[r]` is the node index of rank r (ranks of a node are
/// contiguous, as mpirun and the built-in launcher place them).
std::vector<GroupPlacement> nccl_groups(const std::vector<int>& host_of_rank);

/// Median of `v` (mean of the middle two for an even count); 0 for an empty vector.
double median(std::vector<double> v);

/// The cluster/gpu_spec.h name of a CUDA device name ("NVIDIA H100 80GB HBM3" -> "h100-sxm",
/// "NVIDIA H200" -> "h200", "NVIDIA A100-SXM4-80GB" -> "a100-80gb"), nullopt when unknown.
std::optional<std::string> gpu_spec_name_for_device(const std::string& device_name,
                                                    std::int64_t memory_bytes);
/// The cluster preset whose nodes carry that GPU ("h100-sxm" -> "dgx-h100"), nullopt if none.
std::optional<std::string> preset_for_gpu(const std::string& gpu_spec_name);

/// "profiles/<machine>/<date>-measured.json": where tools/measure_profile.sh keeps a profile.
std::string default_profile_path(const std::string& machine, const std::string& date);

}  // namespace alpasim::exec::microbench
