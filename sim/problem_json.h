#pragma once

#include <filesystem>
#include <string>

#include "core/json_reader.h"
#include "core/status.h"
#include "sim/pipeline_problem.h"

namespace alpasim::sim {

/// Writes `problem` as JSON (schema in docs/simulator.md, "Problem files"): units in every
/// key name, every field written, fixed key order, doubles in shortest round-trip form,
/// so reading the text back gives a problem that simulates bit for bit the same. A
/// collective_cost hook is resolved first (resolve_collectives), since code cannot be
/// written to a file. Errors are those of validate() and resolve_collectives().
core::Result<std::string> problem_to_json(const PipelineProblem& problem);

/// Reads a problem written by problem_to_json. Strict: unknown keys, wrong types, values
/// out of range and a format or version other than "alpa-sim pipeline problem" / 1 are
/// INVALID_ARGUMENT naming the file and JSON pointer. Missing optional keys take the
/// PipelineProblem defaults. The result is validated.
core::Result<PipelineProblem> parse_problem(const core::JsonValue& root);

/// read_json_file + parse_problem.
core::Result<PipelineProblem> read_problem_file(const std::filesystem::path& path);

}  // namespace alpasim::sim
