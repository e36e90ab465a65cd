// alpa-profile as built without the CUDA toolkit (or without cuDNN/NCCL): it measures
// nothing and says so, with exit code 77 ("skipped"), so scripts and tests can tell a
// machine that cannot profile from a failure. apps/alpa-profile/targets.cmake picks this file.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app{"alpa-profile: microbenchmark profiler (this build has no CUDA: it measures nothing).\n"
               "Exit codes: 0 help, 77 built without CUDA.",
               "alpa-profile"};
  app.allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  std::cerr << "alpa-profile: no GPU: built without CUDA (configure with -DALPASIM_WITH_CUDA=ON on "
               "a machine with the CUDA toolkit, cuDNN and NCCL); nothing measured\n";
  return 77;
}
