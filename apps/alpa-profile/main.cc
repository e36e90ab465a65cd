// alpa-profile: measures a microbenchmark profile of this machine's GPUs (docs/profilers.md).
// A thin main: command-line parsing and printing; the work is in exec/cuda/microbench/.
//
// Exit codes: 0 profile written, 1 user error, 2 internal error (CUDA/NCCL failure),
// 77 no GPU (nothing measured; CTest's "skipped" code).
#include <CLI/CLI.hpp>

#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include "core/check.h"
#include "core/status.h"
#include "exec/cuda/microbench/profiler.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUserError = 1;
constexpr int kExitInternalError = 2;
constexpr int kExitNoGpu = 77;

int report_error(const alpasim::core::Status& st) {
  if (st.code() == alpasim::core::StatusCode::kUnavailable) {
    std::cerr << "alpa-profile: no GPU: " << st.message() << " (nothing measured)\n";
    return kExitNoGpu;
  }
  std::cerr << "alpa-profile: error: " << st.message() << "\n";
  return st.code() == alpasim::core::StatusCode::kInternal ? kExitInternalError : kExitUserError;
}

}  // namespace

int main(int argc, char** argv) {
  namespace mb = alpasim::exec::microbench;
  alpasim::core::set_check_failure_exit_code(kExitInternalError);
  try {
    CLI::App app{"alpa-profile: measures GEMM (cuBLASLt), convolution (cuDNN), HBM bandwidth and "
                 "NCCL collectives on this machine's GPUs and writes a profile JSON "
                 "(docs/profiles.md) for `alpa-sim calibrate`.\n"
                 "Exit codes: 0 written, 1 user error, 2 internal error, 77 no GPU.",
                 "alpa-profile"};
    mb::ProfilerOptions opt;
    std::string out, ops = "gemm,conv,hbm,nccl", dtypes, rendezvous;
    bool no_progress = false;
    app.add_option("--out", out, "Profile file (default profiles/<machine>/<date>-measured.json)");
    app.add_flag("--quick", opt.quick, "A short sweep (about a minute on one H100)");
    app.add_option("--ops", ops, "Families to measure: any of gemm,conv,hbm,nccl")->capture_default_str();
    app.add_option("--dtypes", dtypes, "GEMM dtypes (default: fp32,tf32,fp16,bf16 and fp8 where supported)");
    app.add_option("--machine", opt.machine, "Cluster preset of this machine (default: from the GPU)");
    app.add_option("--seed", opt.seed, "Seed of the held-out random GEMM shapes")->capture_default_str();
    app.add_option("--nccl-max-bytes", opt.nccl_max_bytes, "Largest NCCL message")->capture_default_str();
    app.add_option("--nccl-gpus", opt.nccl_gpus, "Local GPUs in the NCCL sweep (0: all)")->capture_default_str();
    app.add_option("--conv-batch", opt.conv_batch, "Images per convolution")->capture_default_str();
    app.add_option("--rendezvous", rendezvous,
                   "Under mpirun: a folder every node sees, for the NCCL id");
    app.add_flag("--no-progress", no_progress, "Never draw the progress bar");
    // The built-in launcher's workers (one per GPU): not for users.
    mb::NcclWorkerOptions worker;
    bool is_worker = false;
    auto* w = app.add_flag("--nccl-worker", is_worker, "internal")->group("");
    app.add_option("--rank", worker.rank, "internal")->group("")->needs(w);
    app.add_option("--nranks", worker.nranks, "internal")->group("")->needs(w);
    app.add_option("--device", worker.device, "internal")->group("")->needs(w);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int code = app.exit(e);
      return code == 0 ? kExitOk : kExitUserError;
    }
    if (is_worker) {
      worker.quick = opt.quick;
      worker.max_bytes = opt.nccl_max_bytes;
      worker.progress = !no_progress;
      return mb::run_nccl_worker(worker);
    }
    auto sel = mb::parse_op_selection(ops);
    if (!sel.ok()) return report_error(sel.status());
    opt.ops = *sel;
    if (!dtypes.empty()) {
      auto d = mb::parse_dtype_list(dtypes);
      if (!d.ok()) return report_error(d.status());
      opt.gemm_dtypes = *d;
    }
    if (opt.nccl_max_bytes < 1024) {
      return report_error(alpasim::core::invalid_argument(
          "--nccl-max-bytes: expected at least 1024, got " + std::to_string(opt.nccl_max_bytes)));
    }
    opt.out = out;
    opt.rendezvous_dir = rendezvous;
    opt.progress = !no_progress;
    for (int i = 0; i < argc; ++i) opt.command_line += (i ? " " : "") + std::string(argv[i]);
    std::error_code ec;
    opt.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) opt.self_exe = argv[0];
    auto res = mb::run_profiler(opt);
    if (!res.ok()) return report_error(res.status());
    std::cout << res->summary;
    std::cout.flush();
    return std::cout ? kExitOk : kExitInternalError;
  } catch (const std::exception& e) {
    std::cerr << "alpa-profile: internal error: " << e.what() << "\n";
    return kExitInternalError;
  }
}
