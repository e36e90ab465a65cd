#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/launch/poll.h"

namespace alpasim::exec::launch {

/// One child process of the built-in launcher.
struct ChildSpec {
  std::vector<std::string> argv;             ///< argv[0] is the executable's path
  std::map<std::string, std::string> env;    ///< set on top of the parent's environment
  std::string log_path;                      ///< the child's stdout and stderr go here
};

/// Starts every child (fork + execve, each in its own process group and killed by the kernel
/// if the launcher dies: PR_SET_PDEATHSIG), then polls them (waitpid WNOHANG every `interval_s`)
/// until all exit 0 (ok). When one exits non-zero or dies from a signal, SIGKILLs the others,
/// reaps them and returns kInternal "rank R (pid P) exited with status S" / "... was killed
/// by signal N (Killed)" followed by the last lines of its log; when `timeout_s` passes
/// first, kills all (SIGKILL to each child's process group) and returns kUnavailable "ranks 0, 2 still running after T s". Never
/// leaves a child behind. Index i of `children` is rank i.
core::Status run_children(const std::vector<ChildSpec>& children, double timeout_s, double interval_s, Clock& clock);

/// The last `max_lines` lines of the file at `path` (its whole text when shorter; "" when
/// unreadable), for error messages.
std::string tail_of_file(const std::string& path, int max_lines);

/// This process's command line (/proc/self/cmdline) with argv[0] replaced by
/// /proc/self/exe's target, so a child re-executes the same binary with the same arguments.
core::Result<std::vector<std::string>> own_command_line();

}  // namespace alpasim::exec::launch
