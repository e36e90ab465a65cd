#include "exec/cuda/microbench/profiler.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include "cluster/cluster_spec.h"
#include "cluster/gpu_spec.h"
#include "core/json_reader.h"
#include "core/text.h"
#include "core/version.h"
#include "exec/cuda/microbench/benches.h"
#include "exec/cuda/microbench/nccl_bench.h"
#include "exec/gpu_device_info.h"

namespace alpasim::exec::microbench {
namespace {

std::string dotted(int v, int major_div, int minor_div, int minor_mod) {
  return std::to_string(v / major_div) + "." + std::to_string(v / minor_div % minor_mod);
}

// UTC date and timestamp of now.
std::pair<std::string, std::string> utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[16], stamp[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", &tm);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return {date, stamp};
}

struct DeviceFacts {
  std::string name;
  std::int64_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;
  int sm_clock_khz = 0, mem_clock_khz = 0;
};

core::Result<DeviceFacts> device_facts(int device) {
  DeviceFacts f;
  cudaDeviceProp prop{};
  ALPASIM_CUDA_TRY(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  f.name = prop.name;
  f.memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
  f.cc_major = prop.major;
  f.cc_minor = prop.minor;
  // Peak clocks from the runtime (NVML, which would give the current clocks, is not part of
  // the toolkit here); 0 when the attribute is not readable.
  if (cudaDeviceGetAttribute(&f.sm_clock_khz, cudaDevAttrClockRate, device) != cudaSuccess) f.sm_clock_khz = 0;
  if (cudaDeviceGetAttribute(&f.mem_clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess) {
    f.mem_clock_khz = 0;
  }
  return f;
}

std::string hbm_json(const std::vector<HbmResult>& hbm, const schema::ProfileProvenance& p,
                     double spec_gbyte_per_s) {
  core::Json j;
  j["about"] = "HBM streaming bandwidth measured by alpa-profile (copy, STREAM triad); the profile "
               "format has no memory table yet, so it is kept beside the profile";
  j["gpu"] = p.gpu;
  j["machine"] = p.machine;
  j["date"] = p.date;
  j["measured_by"] = p.measured_by;
  j["spec_hbm_gbyte_per_s"] = spec_gbyte_per_s;
  core::Json rows = core::Json::array();
  for (const auto& h : hbm) {
    rows.push_back({{"kernel", h.kernel},
                    {"array_bytes", h.array_bytes},
                    {"moved_bytes", h.moved_bytes},
                    {"time_us", h.time_us},
                    {"gbyte_per_s", h.gbyte_per_s},
                    {"fraction_of_spec", spec_gbyte_per_s > 0 ? h.gbyte_per_s / spec_gbyte_per_s : 0.0}});
  }
  j["results"] = rows;
  return core::dump_json(j);
}

core::Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) return core::invalid_argument(path.string() + ": cannot write");
  return core::Status();
}

}  // namespace

core::Result<std::vector<core::DType>> parse_dtype_list(const std::string& text) {
  std::vector<core::DType> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto d = core::parse_dtype(item);
    if (!d) {
      return core::invalid_argument("--dtypes: unknown dtype \"" + item +
                                    "\" (expected fp32, tf32, fp16, bf16 or fp8)");
    }
    out.push_back(*d);
  }
  if (out.empty()) return core::invalid_argument("--dtypes: expected a dtype list, got nothing");
  return out;
}

core::Result<ProfilerResult> run_profiler(const ProfilerOptions& o) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    // kUnavailable (exit 77) only for no GPU or no driver; a driver/runtime mismatch fails.
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    return cuda_device_query_failure(static_cast<int>(err), cudaGetErrorString(err), count, driver, runtime);
  }
  const std::optional<MpiRank> mpi = mpi_rank_from_environment();
  const int device = mpi ? mpi->local_rank % count : 0;
  ALPASIM_ASSIGN_OR_RETURN(DeviceFacts facts, device_facts(device));

  ProfilerResult res;
  schema::Profile& p = res.profile;
  schema::ProfileProvenance& v = p.provenance;
  auto gpu = gpu_spec_name_for_device(facts.name, facts.memory_bytes);
  if (!gpu) {
    return core::failed_precondition("GPU \"" + facts.name +
                                     "\" has no entry in cluster/gpu_spec.h: add one before profiling it");
  }
  v.gpu = *gpu;
  if (!o.machine.empty()) {
    v.machine = o.machine;
  } else if (auto preset = preset_for_gpu(*gpu)) {
    v.machine = *preset;
  } else {
    return core::failed_precondition("no cluster preset carries GPU \"" + *gpu + "\": pass --machine");
  }
  ALPASIM_ASSIGN_OR_RETURN(cluster::ClusterSpec machine, cluster::make_preset_cluster(v.machine, 1));
  if (machine.gpu.name != v.gpu) {
    return core::invalid_argument("--machine " + v.machine + " has GPU " + machine.gpu.name +
                                  " but this GPU is " + v.gpu + " (" + facts.name + ")");
  }
  int driver = 0, runtime = 0, nccl = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  v.driver_version = "CUDA driver API " + dotted(driver, 1000, 10, 100);
  v.cuda_version = dotted(runtime, 1000, 10, 100);
  const std::size_t lt = cublasLtGetVersion();
  v.cublas_version = "cuBLASLt " + std::to_string(lt / 10000) + "." + std::to_string(lt / 100 % 100) +
                     "." + std::to_string(lt % 100);
  const std::size_t dnn = cudnnGetVersion();
  v.cudnn_version = std::to_string(dnn / 10000) + "." + std::to_string(dnn / 100 % 100) + "." +
                    std::to_string(dnn % 100);
  v.nccl_version = std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
                   std::to_string(nccl % 100);
  const auto [date, stamp] = utc_now();
  v.date = date;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ostringstream by;
  by << "alpa-profile " << core::version() << " on " << host << " at " << stamp << ": " << count
     << " x " << facts.name << " (sm_" << facts.cc_major << facts.cc_minor << ", "
     << core::format_bytes(facts.memory_bytes) << ", peak SM clock " << facts.sm_clock_khz / 1000
     << " MHz, memory clock " << facts.mem_clock_khz / 1000 << " MHz)"
     << (mpi ? ", mpirun " + std::to_string(mpi->size) + " ranks" : std::string()) << "; command: "
     << o.command_line;
  v.measured_by = by.str();
  v.source = schema::ProfileSource::kMeasured;
  v.citation = "";

  BenchContext ctx;
  ctx.device = device;
  ctx.progress = o.progress;
  ctx.citation = o.command_line + " (" + facts.name + ", CUDA " + v.cuda_version + ", " +
                 v.cublas_version + ", cuDNN " + v.cudnn_version + ", NCCL " + v.nccl_version + ")";
  if (o.quick) {
    ctx.policy.target_rep_s = 1e-3;
    ctx.policy.reps = 3;
    ctx.policy.warmup = 2;
  }
  std::ostringstream summary;

  // NCCL first: the launcher's workers must own their GPUs before this process fills them.
  if (o.ops.nccl) {
    NcclSweepOptions nopt{o.quick, o.nccl_max_bytes, o.progress, ctx.citation};
    if (mpi && mpi->size > 1) {
      if (o.rendezvous_dir.empty()) {
        return core::invalid_argument("under mpirun, --rendezvous FOLDER (seen by every node) is required");
      }
      ALPASIM_ASSIGN_OR_RETURN(p.collectives, run_nccl_mpi(*mpi, o.rendezvous_dir, nopt));
    } else {
      const int gpus = o.nccl_gpus > 0 ? std::min(o.nccl_gpus, count) : count;
      if (gpus >= 2) {
        ALPASIM_ASSIGN_OR_RETURN(p.collectives, run_nccl_launcher(gpus, o.self_exe, nopt));
      } else {
        summary << "nccl: skipped (one GPU; collectives need two)\n";
      }
    }
    summary << "nccl: " << p.collectives.size() << " rows\n";
  }
  if (mpi && mpi->size > 1 && mpi->rank != 0) {
    return res;  // rank 0 measures the single-GPU families and writes; the others say nothing
  }

  if (o.ops.gemm) {
    std::vector<core::DType> dtypes = o.gemm_dtypes;
    if (dtypes.empty()) {
      dtypes = {core::DType::kFp32, core::DType::kTf32, core::DType::kFp16, core::DType::kBf16};
      // fp8 tensor cores: Ada (8.9) and Hopper (9.0) onward.
      if (facts.cc_major * 10 + facts.cc_minor >= 89) dtypes.push_back(core::DType::kFp8);
    }
    const auto cases = gemm_sweep(dtypes, o.quick, o.seed);
    ALPASIM_ASSIGN_OR_RETURN(p.gemm, run_gemm_cases(cases, ctx));
    summary << "gemm: " << p.gemm.size() << " rows\n";
  }
  if (o.ops.conv) {
    int skipped = 0;
    for (core::DType dt : o.quick ? std::vector<core::DType>{core::DType::kFp16}
                                  : std::vector<core::DType>{core::DType::kFp16, core::DType::kFp32}) {
      ALPASIM_ASSIGN_OR_RETURN(auto rows, run_conv_cases(conv_sweep(o.quick ? 8 : o.conv_batch, dt, o.quick), ctx, skipped));
      p.conv.insert(p.conv.end(), rows.begin(), rows.end());
      if (skipped > 0) summary << "conv " << core::dtype_name(dt) << ": " << skipped << " layers skipped (memory)\n";
    }
    summary << "conv: " << p.conv.size() << " rows\n";
  }
  std::vector<HbmResult> hbm;
  if (o.ops.hbm) {
    ALPASIM_ASSIGN_OR_RETURN(hbm, run_hbm(o.quick ? (std::int64_t{256} << 20) : (std::int64_t{2} << 30), ctx));
    for (const auto& h : hbm) {
      summary << "hbm " << h.kernel << ": " << core::format_fixed(h.gbyte_per_s, 1) << " GB/s ("
              << core::format_fixed(100 * h.gbyte_per_s / machine.gpu.hbm_bandwidth.value() * 1e9, 1)
              << "% of " << core::format_fixed(machine.gpu.hbm_bandwidth.value() / 1e9, 0) << " GB/s spec)\n";
    }
  }

  // Write, then read back through the strict loader: a profile alpa-profile wrote must load.
  res.written = o.out.empty() ? std::filesystem::path(default_profile_path(v.machine, v.date)) : o.out;
  ALPASIM_RETURN_IF_ERROR(write_text(res.written, core::dump_json(schema::profile_to_json(p))));
  ALPASIM_ASSIGN_OR_RETURN(schema::Profile back, schema::read_profile_file(res.written));
  (void)back;
  if (!hbm.empty()) {
    res.hbm_written = res.written;
    res.hbm_written.replace_extension(".hbm.json");
    ALPASIM_RETURN_IF_ERROR(write_text(res.hbm_written, hbm_json(hbm, v, machine.gpu.hbm_bandwidth.value() / 1e9)));
  }
  summary << "wrote " << res.written.string() << "\n";
  if (!res.hbm_written.empty()) summary << "wrote " << res.hbm_written.string() << "\n";
  res.summary = summary.str();
  return res;
}

}  // namespace alpasim::exec::microbench
