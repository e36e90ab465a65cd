#pragma once

#include <filesystem>
#include <string_view>

#include "core/status.h"

namespace alpasim::core {

/// Writes `contents` to `path` so that a reader sees either the old file or the whole new
/// one: a temporary file in the same folder (created exclusively), written, fsynced, then
/// renamed over `path`, and the folder fsynced. rename() replaces a symbolic link at `path`
/// itself and never writes through it. On failure (e.g. a full disk) the temporary is
/// removed, `path` is left as it was, and the error names `path` and the reason.
///
/// For tests of the failure path: when the environment variable ALPASIM_TEST_FAIL_WRITE
/// equals the file name of `path`, the write fails as on a full disk (ENOSPC).
Status write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace alpasim::core
