#include "dist/communicator.h"

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

namespace alpasim::dist {
namespace {

// Sets the variables for the test's scope, then restores the environment.
struct ScopedEnv {
  explicit ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved) {
      if (old) setenv(name.c_str(), old->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
};

TEST_CASE("the launch is read from the launcher's environment") {
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    const LaunchInfo info = launch_info().value();
    CHECK(info.rank == 2);
    CHECK(info.size == 4);
    CHECK(info.launcher == "Open MPI (mpirun)");
  }
  {
    ScopedEnv env({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}});
    CHECK(launch_info().value().launcher == "PMI (srun, MPICH)");
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
    CHECK(launch_info().status().message() ==
          "environment variable OMPI_COMM_WORLD_RANK: expected an integer in [0, 3], got \"4\"");
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "x"}});
    CHECK(launch_info().status().message() ==
          "environment variable OMPI_COMM_WORLD_SIZE: expected an integer in [1, 1048576], got "
          "\"x\"");
  }
}

TEST_CASE("alone, the world is one process that gathers its own bytes") {
  // The test runs without a launcher (ctest, not mpirun).
  REQUIRE(launch_info().value().size == 1);
  Communicator* world = dist::world().value();
  CHECK(world->rank() == 0);
  CHECK(world->size() == 1);
  CHECK(world->gather("part").value() == std::vector<std::string>{"part"});
  CHECK(world->broadcast("id").value() == "id");
}

TEST_CASE("a multi-process launch without MPI in the build says how to get it") {
  if (built_with_mpi()) return;  // the MPI path is tested by reports/sweep_mpirun (mpirun -np 4)
  ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  CHECK(dist::world().status().message() ==
        "started by Open MPI (mpirun) as rank 1 of 4, but this alpa-sim was built without MPI: "
        "install libopenmpi-dev (tools/setup.sh does) and rebuild, or split the work with "
        "--rank/--world-size");
}

}  // namespace
}  // namespace alpasim::dist
