// The MPI backend of dist::Communicator (compiled only when cmake/AlpasimMpi.cmake finds
// MPI; the only file of alpa-sim's driver side that includes mpi.h).
#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "dist/communicator.h"

namespace alpasim::dist {

namespace {

std::string mpi_error(int code, const char* call) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  return std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(length));
}

class MpiWorld final : public Communicator {
 public:
  static core::Result<MpiWorld*> get() {
    static MpiWorld* world = nullptr;
    if (world != nullptr) return world;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      if (const int rc = MPI_Init(nullptr, nullptr); rc != MPI_SUCCESS) {
        return core::invalid_argument(mpi_error(rc, "MPI_Init"));
      }
      // Errors come back as codes (with messages), not as an abort of the whole job.
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    world = new MpiWorld();  // lives until exit: MPI is finalised by the atexit hook
    MPI_Comm_rank(MPI_COMM_WORLD, &world->rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world->size_);
    return world;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  core::Result<std::vector<std::string>> gather(const std::string& bytes) override {
    // MPI counts are ints: a part above 2 GiB would need chunking, far beyond any sweep.
    if (bytes.size() > static_cast<std::size_t>(INT_MAX)) {
      return core::invalid_argument("rank " + std::to_string(rank_) + ": " +
                                    std::to_string(bytes.size()) +
                                    " bytes to gather exceed MPI's int count");
    }
    const int count = static_cast<int>(bytes.size());
    std::vector<int> counts(rank_ == 0 ? static_cast<std::size_t>(size_) : 0);
    if (const int rc = MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
        rc != MPI_SUCCESS) {
      return core::invalid_argument(mpi_error(rc, "MPI_Gather"));
    }
    std::vector<int> offsets(counts.size(), 0);
    std::int64_t total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (total + counts[r] > INT_MAX) {
        return core::invalid_argument("the gathered parts exceed MPI's int count");
      }
      offsets[r] = static_cast<int>(total);
      total += counts[r];
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    if (const int rc = MPI_Gatherv(bytes.data(), count, MPI_CHAR, all.data(), counts.data(),
                                   offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
        rc != MPI_SUCCESS) {
      return core::invalid_argument(mpi_error(rc, "MPI_Gatherv"));
    }
    std::vector<std::string> out;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      out.push_back(all.substr(static_cast<std::size_t>(offsets[r]),
                               static_cast<std::size_t>(counts[r])));
    }
    return out;
  }

  core::Result<std::string> broadcast(const std::string& bytes) override {
    if (bytes.size() > static_cast<std::size_t>(INT_MAX)) {
      return core::invalid_argument(std::to_string(bytes.size()) +
                                    " bytes to broadcast exceed MPI's int count");
    }
    int count = static_cast<int>(bytes.size());
    if (const int rc = MPI_Bcast(&count, 1, MPI_INT, 0, MPI_COMM_WORLD); rc != MPI_SUCCESS) {
      return core::invalid_argument(mpi_error(rc, "MPI_Bcast"));
    }
    std::string out = rank_ == 0 ? bytes : std::string(static_cast<std::size_t>(count), '\0');
    if (const int rc = MPI_Bcast(out.data(), count, MPI_CHAR, 0, MPI_COMM_WORLD);
        rc != MPI_SUCCESS) {
      return core::invalid_argument(mpi_error(rc, "MPI_Bcast"));
    }
    return out;
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

bool built_with_mpi() { return true; }

core::Result<Communicator*> mpi_world() {
  ALPASIM_ASSIGN_OR_RETURN(MpiWorld * w, MpiWorld::get());
  return static_cast<Communicator*>(w);
}

}  // namespace alpasim::dist
