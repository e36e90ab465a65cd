#pragma once

#include <filesystem>
#include <string>

#include "core/json_reader.h"
#include "core/status.h"
#include "ir/builders.h"
#include "ir/graph.h"

namespace alpasim::ir {

/// Reads the JSON graph format of docs/model_graph.md (format "alpa-sim-graph",
/// version 1): tensors are named by the ops that produce them, ops are listed in a
/// topological order, and every shape is static. The graph's own "dtype" and
/// "batch_size" take precedence over `options` (they describe the file's tensors);
/// options only fill them in when absent. Errors name the file, the JSON pointer, what
/// was expected and what was found, e.g.
/// `g.json: /ops/3/inputs/1: expected the name of an earlier op, got "h2"`.
core::Result<Graph> parse_graph_json(const core::JsonValue& root, const BuildOptions& options);

/// Reads `path`; errors name `path_as_written`.
core::Result<Graph> read_graph_json(const std::filesystem::path& path,
                                    const std::string& path_as_written,
                                    const BuildOptions& options);

/// Writes `graph`'s forward ops in the same format (parse_graph_json reads it back to an
/// equal forward graph). Precondition: the graph has no backward ops.
core::Json graph_to_json(const Graph& graph);

}  // namespace alpasim::ir
