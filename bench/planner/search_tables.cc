// Prints the validation tables of docs/validation.md "Search vs Megatron grid":
//   search_tables gpt [max_gpus]   Alpa table 6 on 1..64 V100: searched vs best Megatron grid
//   search_tables wresnet          Alpa table 8 on 16 and 32 V100: searched vs equal-layer
//                                  (the equal_layer row of the search's own baseline table)
//   search_tables moe              Alpa table 7 on 16 and 32 V100: searched vs dp + ep
//   search_tables one MODEL GPUS   a single case with the whole baseline table
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/planner/search_cases.h"
#include "core/text.h"

using namespace alpasim;

namespace {

struct Case {
  std::string name;
  ir::ModelConfig model;
  std::int64_t gpus;
  std::int64_t batch;
  core::DType dtype;
  std::string optimizer;
};

std::vector<Case> gpt_cases() {
  return {{"GPT-3 350M", bench::gpt("GPT-3 350M", 24, 1024, 16), 1, 1024, core::DType::kFp16, "adam"},
          {"GPT-3 760M", bench::gpt("GPT-3 760M", 24, 1536, 16), 2, 1024, core::DType::kFp16, "adam"},
          {"GPT-3 1.3B", bench::gpt("GPT-3 1.3B", 24, 2048, 32), 4, 1024, core::DType::kFp16, "adam"},
          {"GPT-3 2.6B", bench::gpt("GPT-3 2.6B", 32, 2560, 32), 8, 1024, core::DType::kFp16, "adam"},
          {"GPT-3 6.7B", bench::gpt("GPT-3 6.7B", 32, 4096, 32), 16, 1024, core::DType::kFp16, "adam"},
          {"GPT-3 15B", bench::gpt("GPT-3 15B", 48, 5120, 40), 32, 1024, core::DType::kFp16, "adam"},
          {"GPT-3 39B", bench::gpt("GPT-3 39B", 48, 8192, 64), 64, 1024, core::DType::kFp16, "adam"}};
}

std::vector<Case> wresnet_cases() {
  return {{"Wide-ResNet 4B", bench::wide_resnet("Wide-ResNet 4B", 50, 640, 2), 16, 1536, core::DType::kFp32, "sgd"},
          {"Wide-ResNet 6.8B", bench::wide_resnet("Wide-ResNet 6.8B", 50, 320, 16), 32, 1536, core::DType::kFp32, "sgd"}};
}

std::vector<Case> moe_cases() {
  return {{"GShard MoE 10B", bench::moe("GShard MoE 10B", 16, 1536, 16, 32, 12288), 16, 1024, core::DType::kFp16, "adam"},
          {"GShard MoE 27B", bench::moe("GShard MoE 27B", 16, 2048, 16, 48, 16384), 32, 1024, core::DType::kFp16, "adam"}};
}

// User + system CPU seconds of this process so far (every thread).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

planner::Prediction run_mode(const Case& c, const std::string& mode, double* wall, std::string* what,
                             bool baselines = false, bool print_baselines = true,
                             std::vector<planner::BaselineRow>* rows = nullptr) {
  planner::SearchInput in = bench::input_for(c.model, "aws-p3.16xlarge", c.gpus, c.batch, c.dtype, c.optimizer);
  in.mode = mode;
  in.options.compare_baselines = baselines;
  auto r = planner::search(in);
  if (!r.ok()) {
    *what = r.status().message();
    *wall = 0;
    return {};
  }
  *wall = r.value().wall_time_s;
  *what = r.value().explanation.empty() ? "" : r.value().explanation.front();
  for (const auto& e : r.value().explanation) {
    if (mode == "alpa" && e.rfind("chosen: ", 0) == 0) *what = e.substr(8);
  }
  if (baselines && print_baselines) std::printf("%s", planner::format_comparison(r.value()).c_str());
  if (rows != nullptr) *rows = r.value().baselines;
  return r.value().prediction;
}

void table(const std::vector<Case>& cases, const std::string& other, const std::string& label) {
  std::printf("| model | GPUs | searched s/iter | searched TFLOP/s/GPU | %s s/iter | %s TFLOP/s/GPU | speedup | search wall s | searched plan | %s plan |\n",
              label.c_str(), label.c_str(), label.c_str());
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& c : cases) {
    double w1 = 0, w2 = 0;
    std::string d1, d2;
    planner::Prediction a, b;
    if (other == "equal_layer") {
      // The search compares its baselines (compare_baselines): the equal_layer row comes
      // from the same run (same cost model and cache), whose equal partitions then cover
      // every (microbatch, recompute) point whatever the time limit.
      std::vector<planner::BaselineRow> rows;
      const double cpu0 = cpu_seconds();
      a = run_mode(c, "alpa", &w1, &d1, true, false, &rows);
      std::fprintf(stderr, "%s on %lld GPUs: search + baselines %.2f s wall, %.2f s CPU\n",
                   c.name.c_str(), static_cast<long long>(c.gpus), w1, cpu_seconds() - cpu0);
      for (const auto& row : rows) {
        if (row.mode != other) continue;
        if (row.ok) b = row.prediction;
        d2 = row.description;
      }
    } else {
      a = run_mode(c, "alpa", &w1, &d1);
      b = run_mode(c, other, &w2, &d2);
    }
    const double speedup = a.iteration_time_s > 0 ? b.iteration_time_s / a.iteration_time_s : 0;
    std::printf("| %s | %lld | %.3f | %.2f | %.3f | %.2f | %.3f | %.2f | %s | %s |\n", c.name.c_str(),
                static_cast<long long>(c.gpus), a.iteration_time_s, a.model_tflops_per_gpu,
                b.iteration_time_s, b.model_tflops_per_gpu, speedup, w1, d1.c_str(), d2.c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "gpt";
  if (what == "gpt") {
    auto cases = gpt_cases();
    const long long max_gpus = argc > 2 ? std::atoll(argv[2]) : 64;
    std::vector<Case> keep;
    for (auto& c : cases) if (c.gpus <= max_gpus) keep.push_back(c);
    table(keep, "megatron", "Megatron");
  } else if (what == "wresnet") {
    table(wresnet_cases(), "equal_layer", "equal-layer");
  } else if (what == "moe") {
    table(moe_cases(), "dp_ep", "dp+ep");
  } else if (what == "timing") {
    // Search wall time of the two issue targets (threads = 2, this machine's cores).
    struct T { std::string name; ir::ModelConfig model; std::string preset; std::int64_t gpus, batch; };
    const std::vector<T> ts = {
        {"GPT-3 39B on 64 V100", bench::gpt("GPT-3 39B", 48, 8192, 64), "aws-p3.16xlarge", 64, 1024},
        {"GPT-3 175B on 1024 A100", bench::gpt("GPT-3 175B", 96, 12288, 96, 2048), "dgx-a100-80gb", 1024, 1536}};
    for (const auto& t : ts) {
      planner::SearchInput in = bench::input_for(t.model, t.preset, t.gpus, t.batch, core::DType::kFp16, "adam");
      in.options.compare_baselines = false;
      const auto t0 = std::chrono::steady_clock::now();
      const double cpu0 = cpu_seconds();
      auto r = planner::search(in);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double cpu = cpu_seconds() - cpu0;
      if (!r.ok()) {
        std::printf("%s: %s (%.2f s)\n", t.name.c_str(), r.status().message().c_str(), wall);
        continue;
      }
      std::printf("%s: search wall time %.2f s (CPU %.2f s), %d intra-op solves, %d candidates "
                  "simulated, predicted %.3f s/iter, %.1f TFLOP/s/GPU\n", t.name.c_str(), wall, cpu,
                  r.value().intra_op_solves, r.value().candidates_simulated,
                  r.value().prediction.iteration_time_s, r.value().prediction.model_tflops_per_gpu);
      for (const auto& line : r.value().explanation) std::printf("  %s\n", line.c_str());
      std::fflush(stdout);
    }
  } else if (what == "one" && argc > 3) {
    const std::string family = argv[2];
    const long long gpus = std::atoll(argv[3]);
    std::vector<Case> all = gpt_cases();
    for (auto& c : wresnet_cases()) all.push_back(c);
    for (auto& c : moe_cases()) all.push_back(c);
    for (const auto& c : all) {
      if (c.name.find(family) == std::string::npos || c.gpus != gpus) continue;
      double w = 0;
      std::string d;
      run_mode(c, argc > 4 ? argv[4] : "alpa", &w, &d, true);
      std::printf("wall %.2f s: %s\n", w, d.c_str());
    }
  } else {
    std::fprintf(stderr, "usage: search_tables gpt [max_gpus] | wresnet | moe | one NAME GPUS [mode]\n");
    return 2;
  }
  return 0;
}
