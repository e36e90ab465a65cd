// alpa-exec: run a plan (docs/plan.md) on real devices and report measured times.
// A thin main: parsing, printing and files; lowering and backends live in exec/.
//
// Exit codes (docs/executor.md): 0 success, 1 user error or failed run (message on stderr),
// 2 internal error, 77 no GPU or no driver for --backend cuda (a skip, as CTest counts it;
// apps/alpa-exec/exit_codes.h).
#include <algorithm>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "apps/alpa-exec/backends.h"
#include "apps/alpa-exec/exit_codes.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/version.h"
#include "exec/lower.h"
#include "exec/trace.h"
#include "exec/verify.h"
#include "schema/plan.h"

namespace {

using alpasim::apps::alpa_exec::kExitInternalError;
using alpasim::apps::alpa_exec::kExitOk;
using alpasim::apps::alpa_exec::kExitUserError;
using alpasim::apps::alpa_exec::Step;

struct Options {
  std::string plan;
  std::string backend = "cpu";
  int iterations = 3;
  int warmup = 1;
  double timeout_s = 300;
  std::string out_dir;
  std::string predicted;
  bool json = false;
  bool data_parallel_default = false;
  bool print_program = false;
};

int fail(const alpasim::core::Status& s, Step step = Step::kOther) {
  std::cerr << "alpa-exec: error: " << s.message() << "\n";
  return alpasim::apps::alpa_exec::exit_code_for(s.code(), step);
}

// Whole or not at all (core/atomic_file.h): a crash or a full disk leaves no half-written
// trace.json or measured.json for a later comparison to read.
alpasim::core::Status write_file(const std::filesystem::path& path, const std::string& text) {
  return alpasim::core::write_file_atomically(path, text);
}

int run(const Options& opt) {
  using namespace alpasim;
  auto plan = schema::read_plan_file(opt.plan);
  if (!plan.ok()) return fail(plan.status());
  exec::LowerOptions lo;
  lo.ignore_operator_shardings = opt.data_parallel_default;
  auto program = exec::lower_plan(*plan, lo);
  if (!program.ok()) return fail(program.status().with_context(opt.plan));
  auto stats = exec::verify_program(*program);
  if (!stats.ok()) return fail(stats.status());
  if (opt.print_program) {
    std::cout << exec::program_to_text(*program);
    return kExitOk;
  }
  std::optional<exec::Prediction> prediction;
  if (!opt.predicted.empty()) {
    auto p = exec::read_prediction(opt.predicted);
    if (!p.ok()) return fail(p.status());
    prediction = *p;
    // A prediction prices GPUs; the CPU backend's times are not a measurement of one.
    prediction->times_comparable = opt.backend != "cpu";
  }
  auto backend = apps::make_backend(opt.backend);
  if (!backend.ok()) return fail(backend.status(), Step::kCreateBackend);
  exec::RunOptions ro;
  ro.iterations = opt.iterations;
  ro.warmup_iterations = opt.warmup;
  ro.timeout_s = opt.timeout_s;
  ro.report_values = false;  // it reports the loss, times and memory, never the values
  auto result = (*backend)->run(*program, ro);
  if (!result.ok()) return fail(result.status());
  const exec::MeasuredSummary summary = exec::summarize(*program, *result);
  core::Json j = exec::summary_to_json(*program, summary, stats->peak_bytes, prediction);
  j["backend"] = result->backend;
  j["plan"] = opt.plan;
  j["loss"] = result->loss;
  j["iterations"] = opt.iterations;
  j["warmup"] = opt.warmup;
  if (!opt.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.out_dir, ec);
    if (ec) return fail(core::invalid_argument(opt.out_dir + ": cannot create directory: " + ec.message()));
    const std::string gen = "alpa-exec " + std::string(core::version()) + " backend=" + result->backend;
    if (auto st = write_file(std::filesystem::path(opt.out_dir) / "trace.json",
                             exec::measured_trace_json(*program, *result, gen));
        !st.ok()) {
      return fail(st);
    }
    if (auto st = write_file(std::filesystem::path(opt.out_dir) / "measured.json", j.dump(2) + "\n"); !st.ok()) {
      return fail(st);
    }
  }
  if (opt.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "plan " << opt.plan << ": " << program->stage_devices.size() << " stages, "
              << program->devices.size() << " devices, " << program->num_microbatches
              << " microbatches, backend " << result->backend << ", loss " << result->loss << "\n\n"
              << exec::summary_to_text(*program, summary, stats->peak_bytes, prediction);
    if (!prediction) {
      std::cout << "\n(no prediction: pass --predicted SUMMARY.json, alpa-sim's output for this plan, "
                   "to print predicted vs measured)\n";
    }
  }
  std::cout.flush();
  return std::cout ? kExitOk : kExitInternalError;
}

}  // namespace

int main(int argc, char** argv) {
  // A failed CHECK is an internal error (exit 2), as in alpa-sim, not an abort (134).
  alpasim::core::set_check_failure_exit_code(kExitInternalError);
  Options opt;
  CLI::App app{"alpa-exec: run a plan on real devices and measure it"};
  app.add_option("plan", opt.plan, "Plan file (docs/plan.md)")->required();
  std::string names;
  for (const auto& n : alpasim::apps::backend_names()) names += (names.empty() ? "" : "|") + n;
  app.add_option("--backend", opt.backend, "cpu|cuda (this build: " + names + ")");
  app.add_option("--iterations", opt.iterations, "Measured iterations")->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "Unmeasured iterations first")->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", opt.timeout_s, "Seconds a device waits for a peer before the run aborts")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", opt.out_dir, "Write trace.json and measured.json here");
  app.add_option("--predicted", opt.predicted,
                 "alpa-sim's summary.json (or --json output, or a simulator report) for this plan: "
                 "print predicted vs measured (the error in percent only on a GPU backend)");
  app.add_flag("--json", opt.json, "Print one JSON object on stdout");
  app.add_flag("--data-parallel-default", opt.data_parallel_default,
               "Replace the plan's per-operator shardings by data parallelism (default: run each operator on its shards)");
  app.add_flag("--print-program", opt.print_program, "Print the lowered instruction lists and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUserError;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::cerr << "alpa-exec: internal error: " << e.what() << "\n";
    return kExitInternalError;
  }
}
