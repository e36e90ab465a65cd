#include "dist/communicator.h"

#include <cstdlib>
#include <memory>

namespace alpasim::dist {

namespace {

constexpr int kMaxRanks = 1 << 20;

core::Result<int> env_int(const char* name, int min, int max) {
  const char* v = std::getenv(name);
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < min || x > max) {
    return core::invalid_argument(std::string("environment variable ") + name +
                                  ": expected an integer in [" + std::to_string(min) + ", " +
                                  std::to_string(max) + "], got \"" + v + "\"");
  }
  return static_cast<int>(x);
}

// Only process of its job.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  core::Result<std::vector<std::string>> gather(const std::string& bytes) override {
    return std::vector<std::string>{bytes};
  }
  core::Result<std::string> broadcast(const std::string& bytes) override { return bytes; }
};

}  // namespace

// Defined by mpi_communicator.cc in builds with MPI, by no_mpi.cc otherwise.
core::Result<Communicator*> mpi_world();

core::Result<LaunchInfo> launch_info() {
  struct Source {
    const char* rank;
    const char* size;
    const char* launcher;
  };
  static constexpr Source kSources[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI (mpirun)"},
      {"PMIX_RANK", "PMIX_SIZE", "PMIx"},
      {"PMI_RANK", "PMI_SIZE", "PMI (srun, MPICH)"},
  };
  for (const Source& s : kSources) {
    if (std::getenv(s.rank) == nullptr || std::getenv(s.size) == nullptr) continue;
    LaunchInfo info;
    ALPASIM_ASSIGN_OR_RETURN(info.size, env_int(s.size, 1, kMaxRanks));
    ALPASIM_ASSIGN_OR_RETURN(info.rank, env_int(s.rank, 0, info.size - 1));
    info.launcher = s.launcher;
    return info;
  }
  return LaunchInfo{};
}

core::Result<Communicator*> world() {
  ALPASIM_ASSIGN_OR_RETURN(LaunchInfo info, launch_info());
  if (info.size == 1) {
    static SingleProcess alone;
    return &alone;
  }
  return mpi_world();
}

}  // namespace alpasim::dist
