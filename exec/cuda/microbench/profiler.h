#pragma once

// alpa-profile's entry points: plain C++ (no CUDA type), called by apps/alpa-profile.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "exec/cuda/microbench/sweep.h"
#include "schema/profile.h"

namespace alpasim::exec::microbench {

/// What to measure and where to write it (apps/alpa-profile flags, docs/profilers.md).
struct ProfilerOptions {
  OpSelection ops{true, true, true, true};
  bool quick = false;                 ///< about a minute on one H100
  std::filesystem::path out;          ///< profile JSON; empty = profiles/<machine>/<date>-measured.json
  std::vector<core::DType> gemm_dtypes;  ///< empty = every dtype the GPU supports
  std::string machine;                ///< cluster preset override; empty = from the GPU name
  std::uint64_t seed = 1;             ///< held-out random GEMM shapes
  std::int64_t nccl_max_bytes = std::int64_t{4} << 30;  ///< largest message (nccl-tests -e)
  int nccl_gpus = 0;                  ///< local GPUs for NCCL (0 = all)
  std::int64_t conv_batch = 32;       ///< images per convolution
  bool progress = true;               ///< draw the bar when stderr is a terminal
  std::string command_line;           ///< recorded in provenance and citations
  std::filesystem::path self_exe;     ///< this program, re-executed as NCCL workers
  std::filesystem::path rendezvous_dir;  ///< under mpirun: shared folder for the NCCL id
};

/// What one run produced.
struct ProfilerResult {
  schema::Profile profile;            ///< what was measured (empty on mpirun ranks other than 0)
  std::filesystem::path written;      ///< the profile file
  std::filesystem::path hbm_written;  ///< the HBM side file (empty when not measured)
  std::string summary;                ///< a few lines for the terminal
};

/// Runs the selected sweeps on this machine's GPUs and writes the profile.
/// kUnavailable "no usable CUDA device: <reason>" only where there is no GPU or no driver
/// (exec/gpu_device_info.h): the caller exits 77; any other failure is an error. Under mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set) every rank calls this; the
/// NCCL sweep spans all ranks and rank 0 writes the profile.
core::Result<ProfilerResult> run_profiler(const ProfilerOptions& options);

/// A hidden worker of the built-in launcher (`alpa-profile --nccl-worker ...`): one rank,
/// one GPU; reads the 128-byte ncclUniqueId from stdin; rank 0 writes result lines to stdout.
struct NcclWorkerOptions {
  int rank = 0;                ///< this worker's rank
  int nranks = 0;              ///< number of workers
  int device = 0;              ///< CUDA device of this worker
  bool quick = false;          ///< the short sweep
  std::int64_t max_bytes = 0;  ///< largest message
  bool progress = true;        ///< rank 0 draws the bar (terminal only)
};
/// Runs one worker; the exit code of the worker process.
int run_nccl_worker(const NcclWorkerOptions& options);

/// "fp32,bf16" -> dtypes; error `--dtypes: unknown dtype "x" (expected fp32, tf32, fp16, bf16
/// or fp8)`.
core::Result<std::vector<core::DType>> parse_dtype_list(const std::string& text);

}  // namespace alpasim::exec::microbench
