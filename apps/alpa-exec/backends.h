#pragma once
// The backends alpa-exec can run (STYLE.md 9.6: explicit registration, no static
// initialisers; the one #ifdef ALPASIM_HAVE_CUDA of the codebase is in backends.cc).

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/backend.h"

namespace alpasim::apps {

/// "cpu", and "cuda" in a CUDA build.
std::vector<std::string> backend_names();

/// The backend called `name`. "cuda" in a CPU build: kUnavailable "built without CUDA
/// (configure with -DALPASIM_WITH_CUDA=ON)"; on a machine without a GPU: kUnavailable with
/// the CUDA runtime's reason (alpa-exec exits 77).
core::Result<std::unique_ptr<exec::Backend>> make_backend(const std::string& name);

}  // namespace alpasim::apps
