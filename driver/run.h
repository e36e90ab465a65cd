#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "core/json_reader.h"
#include "core/status.h"
#include "driver/scenario.h"

namespace alpasim::driver {

/// What `alpa-sim run` produces for one scenario.
struct RunReport {
  core::Json json;   ///< the --json object (byte-identical for the same scenario)
  std::string text;  ///< the human summary
};

/// Runs the main job on a scenario: load, summarise, and (once they exist) plan, simulate.
core::Result<RunReport> run_scenario(const Scenario& scenario);

/// Writes the report's files into `dir` (created if missing): summary.json, summary.txt and
/// scenario.json (the normalised scenario).
core::Status write_run_outputs(const RunReport& report, const Scenario& scenario,
                               const std::filesystem::path& dir);

}  // namespace alpasim::driver
