// alpa-sim: plan, predict and report distributed training of a model on a cluster.
// A thin main: parsing the command line and printing; all work is in driver/.
//
// Exit codes (docs/cli.md): 0 success, 1 user error (message on stderr), 2 internal error.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/json_reader.h"
#include "core/status.h"
#include "core/text.h"
#include "core/version.h"
#include "driver/calibrate.h"
#include "driver/capacity.h"
#include "driver/run.h"
#include "driver/scenario.h"
#include "driver/sweep.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUserError = 1;
constexpr int kExitInternalError = 2;

struct Options {
  std::string scenario;
  bool json = false;
  bool quiet = false;
  std::string out_dir;
  std::string profile;  ///< --profile FILE: overrides the scenario's "profile"
  bool no_timing = false;  ///< --no-timing: omit wall-clock measurements (byte-identical output)
  bool no_baselines = false;  ///< --no-baselines: the scenario's search.baselines = false
};

struct CalibrateOptions {
  std::string profile;
  std::string machine;
  bool json = false;
  bool all_rows = false;
  std::string prior;
};

// Set once from the command line (before parsing, so a command-line error is JSON too):
// with --json, every failure also prints {"error": {...}} on stdout, so a script reading
// stdout always gets one JSON object.
bool g_json_errors = false;

bool is_json_pointer(std::string_view s) {
  return !s.empty() && s.front() == '/' && s.find(' ') == std::string_view::npos;
}

// A message reads "<file>: <JSON pointer>: <what>" (ARCHITECTURE.md, errors); either prefix
// may be missing. A file is a token without spaces that names a path (has '/' or '.').
alpasim::core::Json error_json(std::string_view message, int exit_code) {
  using alpasim::core::Json;
  Json error = {{"message", std::string(message)}, {"file", nullptr}, {"pointer", nullptr},
                {"exit_code", exit_code}};
  std::string_view rest = message;
  auto take_prefix = [&rest]() -> std::string_view {
    const std::size_t at = rest.find(": ");
    if (at == std::string_view::npos) return {};
    const std::string_view head = rest.substr(0, at);
    return head.find(' ') == std::string_view::npos ? head : std::string_view{};
  };
  std::string_view head = take_prefix();
  if (head.empty()) return Json{{"error", std::move(error)}};
  rest.remove_prefix(head.size() + 2);
  const std::string_view second = take_prefix();
  // "<file>: <pointer>: ..." when a pointer follows; otherwise the one prefix is a file when
  // it names one (an absolute file path also starts with '/', like a pointer).
  const bool head_is_file =
      is_json_pointer(second) || !is_json_pointer(head) || head.ends_with(".json") ||
      std::filesystem::exists(std::filesystem::path(std::string(head)));
  if (head_is_file && head.find_first_of("/.") != std::string_view::npos) {
    error["file"] = std::string(head);
    if (is_json_pointer(second)) error["pointer"] = std::string(second);
  } else if (is_json_pointer(head)) {
    error["pointer"] = std::string(head);
  }
  return Json{{"error", std::move(error)}};
}

int fail(std::string_view message, int exit_code) {
  if (g_json_errors) std::cout << alpasim::core::dump_json(error_json(message, exit_code)) << std::flush;
  return exit_code;
}

int report_error(const alpasim::core::Status& status) {
  std::cerr << "alpa-sim: error: " << status.message() << "\n";
  return fail(status.message(), status.code() == alpasim::core::StatusCode::kInternal
                                    ? kExitInternalError
                                    : kExitUserError);
}

int run(const Options& opt) {
  using namespace alpasim;
  core::Result<driver::Scenario> scenario =
      opt.scenario.empty() ? driver::load_default_scenario() : driver::load_scenario(opt.scenario);
  if (!scenario.ok()) return report_error(scenario.status());
  if (!opt.profile.empty()) {
    if (auto st = driver::use_profile_file(*scenario, opt.profile); !st.ok()) return report_error(st);
  }
  if (opt.no_baselines) scenario->search.compare_baselines = false;
  driver::RunSettings settings;
  settings.include_timing = !opt.no_timing;
  // Progress only where a person watches (never in pipes, files or CI logs): one line,
  // rewritten in place, with the seconds since the run started; cleared before the result.
  const bool show_progress = !opt.quiet && isatty(STDERR_FILENO) == 1;
  const auto started = std::chrono::steady_clock::now();
  if (show_progress) {
    settings.progress = [started](const std::string& phase) {
      const double elapsed_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::cerr << "\r\033[Kalpa-sim: searching: " << phase << " ("
                << alpasim::core::format_fixed(elapsed_s, 1) << " s)" << std::flush;
    };
  }
  core::Result<driver::RunReport> report = driver::run_scenario(*scenario, settings);
  if (show_progress) std::cerr << "\r\033[K" << std::flush;
  if (!report.ok()) return report_error(report.status());
  for (const std::string& w : report->warnings) std::cerr << "alpa-sim: warning: " << w << "\n";
  if (!opt.out_dir.empty()) {
    if (auto st = driver::write_run_outputs(*report, *scenario, opt.out_dir); !st.ok()) {
      return report_error(st);
    }
  }
  if (opt.json) {
    std::cout << core::dump_json(report->json);
  } else if (!opt.quiet) {
    std::cout << report->text;
  }
  std::cout.flush();
  return std::cout ? kExitOk : kExitInternalError;
}

void add_run_options(CLI::App& app, Options& opt) {
  app.add_option("scenario", opt.scenario,
                 "Scenario file (docs/scenario.md); the built-in default scenario when omitted");
  app.add_flag("--json", opt.json, "Print one JSON object on stdout and nothing else");
  app.add_flag("-q,--quiet", opt.quiet, "Print nothing on success (errors still go to stderr)");
  app.add_flag("--no-timing", opt.no_timing,
               "Omit wall-clock measurements (search.wall_time_s), so the same scenario gives "
               "byte-identical output");
  app.add_flag("--no-baselines", opt.no_baselines,
               "Search only: skip the baselines and their comparison table (as \"baselines\": "
               "false in the scenario's search block)");
  app.add_option("--out", opt.out_dir, "Write output files (summary, scenario, plan, trace) here");
  app.add_option("--profile", opt.profile,
                 "Use this profile file (alpa-profile's output) instead of the scenario's \"profile\"");
}

struct StudyOptions {  ///< `alpa-sim sweep` and `alpa-sim capacity`
  std::string scenario;
  std::string out_dir, csv_file, json_file, report, markdown;
  bool json = false, csv = false, quiet = false, merge_only = false;
  int threads = 0;  ///< 0: one per hardware thread
  int rank = -1, world_size = -1;
  double merge_wait_s = 0;
};

void add_study_options(CLI::App& cmd, StudyOptions& o, bool sweep) {
  cmd.add_option("scenario", o.scenario,
                 sweep ? "Scenario with a \"what_if\" block: the points to plan (docs/whatif.md)"
                       : "Scenario with a \"capacity\" block: the job, the deadline and the "
                         "cluster kinds to compare (docs/capacity.md)")
      ->required();
  cmd.add_option("--out", o.out_dir, "Write <name>.csv, .json, .html and .md into this folder");
  cmd.add_option("--report", o.report, "Write the self-contained HTML report here");
  cmd.add_option("--markdown", o.markdown, "Write the Markdown report here");
  cmd.add_option("--csv-file", o.csv_file, "Write the CSV table here");
  cmd.add_option("--json-file", o.json_file, "Write the JSON table here");
  cmd.add_flag("--json", o.json, "Print the JSON table on stdout instead of the text report");
  cmd.add_flag("--csv", o.csv, "Print the CSV table on stdout instead of the text report");
  cmd.add_flag("-q,--quiet", o.quiet, "Print nothing on success (errors still go to stderr)");
  cmd.add_option("--threads", o.threads, "Points planned at once (default: hardware threads)")
      ->check(CLI::Range(0, 1024));
  if (sweep) {
    cmd.add_option("--rank", o.rank,
                   "This job's share of a sweep split across separate jobs (part files in "
                   "--out); under mpirun/srun the MPI rank is used without it");
    cmd.add_option("--world-size", o.world_size, "Jobs splitting the sweep (needs --out)");
    cmd.add_flag("--merge-only", o.merge_only, "Only merge the part files in --out");
    cmd.add_option("--merge-wait-s", o.merge_wait_s,
                   "Rank 0 of a split by flags: seconds to wait for missing part files "
                   "(default 0: look once)");
  }
}

int study(const StudyOptions& o, bool sweep) {
  using namespace alpasim;
  driver::StudyCommand c;
  c.scenario_path = o.scenario;
  c.out_dir = o.out_dir;
  c.csv_file = o.csv_file;
  c.json_file = o.json_file;
  c.report_html = o.report;
  c.markdown = o.markdown;
  c.print = o.quiet ? "none" : o.json ? "json" : o.csv ? "csv" : "text";
  c.threads = o.threads > 0 ? o.threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  c.rank = o.rank;
  c.world_size = o.world_size;
  c.merge_only = o.merge_only;
  c.merge_wait_s = o.merge_wait_s;
  // A progress bar only where a person watches: never in pipes, files or CI logs.
  if (!o.quiet && isatty(STDERR_FILENO) == 1) {
    c.progress = [](std::size_t done, std::size_t total) {
      constexpr std::size_t kWidth = 40;
      const std::size_t filled = total == 0 ? kWidth : done * kWidth / total;
      std::cerr << "\ralpa-sim: [" << std::string(filled, '#') << std::string(kWidth - filled, '.')
                << "] " << done << "/" << total << " points" << (done == total ? "\n" : "")
                << std::flush;
    };
  }
  auto out = sweep ? driver::sweep_command(c) : driver::capacity_command(c);
  if (!out.ok()) return report_error(out.status());
  std::cout << *out;
  std::cout.flush();
  return std::cout ? kExitOk : kExitInternalError;
}

int calibrate(const CalibrateOptions& opt) {
  using namespace alpasim;
  auto rep = driver::calibrate_profile(opt.profile, {opt.machine, opt.all_rows, opt.prior});
  if (!rep.ok()) return report_error(rep.status());
  std::cout << (opt.json ? core::dump_json(rep->json) : rep->text);
  std::cout.flush();
  return std::cout ? kExitOk : kExitInternalError;
}

}  // namespace

int main(int argc, char** argv) {
  alpasim::core::set_check_failure_exit_code(kExitInternalError);
  for (int i = 1; i < argc; ++i) g_json_errors |= std::string_view(argv[i]) == "--json";
  alpasim::core::set_check_failure_hook(
      [](const char* text) { fail(std::string("internal error: ") + text, kExitInternalError); });
  // `alpa-sim help [COMMAND]` reads as `alpa-sim [COMMAND] --help`, not as a scenario file.
  std::vector<char*> args(argv, argv + argc);
  std::string help_flag = "--help";
  if (argc >= 2 && std::string_view(argv[1]) == "help") {
    args.erase(args.begin() + 1);
    args.push_back(help_flag.data());
  }
  argc = static_cast<int>(args.size());
  argv = args.data();
  try {
    CLI::App app{"alpa-sim: plans how to train a large model on a GPU cluster, predicts how "
                 "fast it runs and how much memory each GPU needs.\n"
                 "Exit codes: 0 success, 1 user error, 2 internal error.",
                 "alpa-sim"};
    app.set_version_flag("--version", std::string("alpa-sim ") +
                                          std::string(alpasim::core::version()));
    Options opt;
    add_run_options(app, opt);
    CLI::App* run_cmd = app.add_subcommand("run", "Plan and predict one scenario (the default)");
    Options run_opt;
    add_run_options(*run_cmd, run_opt);
    CLI::App* cal_cmd = app.add_subcommand(
        "calibrate", "Fit the cost model to a profile and print the fit and held-out error per "
                     "operator class (docs/profilers.md)");
    CalibrateOptions cal_opt;
    cal_cmd->add_option("profile", cal_opt.profile, "Profile file (docs/profiles.md)")->required();
    cal_cmd->add_option("--machine", cal_opt.machine,
                        "Cluster preset of the machine (default: the profile's)");
    cal_cmd->add_flag("--json", cal_opt.json, "Print one JSON object on stdout and nothing else");
    cal_cmd->add_flag("--all-rows", cal_opt.all_rows, "List fit rows too, not only check rows");
    cal_cmd->add_option("--prior", cal_opt.prior,
                        "Calibrate this profile first and inherit what PROFILE does not measure");
    CLI::App* sweep_cmd = app.add_subcommand(
        "sweep", "Plan every point of the scenario's what_if block; CSV, JSON, HTML and "
                 "Markdown tables (docs/whatif.md)");
    StudyOptions sweep_opt;
    add_study_options(*sweep_cmd, sweep_opt, true);
    CLI::App* capacity_cmd = app.add_subcommand(
        "capacity", "Answer the scenario's capacity block: smallest cluster per kind that meets "
                    "the deadline, time and cost of each, the cost-optimal one (docs/capacity.md)");
    StudyOptions capacity_opt;
    add_study_options(*capacity_cmd, capacity_opt, false);
    app.require_subcommand(0, 1);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);  // prints help/version on stdout, errors on stderr
      return code == 0 ? kExitOk : fail(e.what(), kExitUserError);
    }
    if (cal_cmd->parsed()) return calibrate(cal_opt);
    if (sweep_cmd->parsed()) return study(sweep_opt, true);
    if (capacity_cmd->parsed()) return study(capacity_opt, false);
    return run(run_cmd->parsed() ? run_opt : opt);
  } catch (const std::exception& e) {
    std::cerr << "alpa-sim: internal error: " << e.what() << "\n";
    return fail(std::string("internal error: ") + e.what(), kExitInternalError);
  }
}
