#include "apps/alpa-exec/backends.h"

#include "exec/cpu/cpu_backend.h"
#ifdef ALPASIM_HAVE_CUDA
#include "exec/cuda/cuda_backend.h"
#endif

namespace alpasim::apps {

std::vector<std::string> backend_names() {
#ifdef ALPASIM_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

core::Result<std::unique_ptr<exec::Backend>> make_backend(const std::string& name) {
  if (name == "cpu") return exec::cpu::make_cpu_backend();
  if (name == "cuda") {
#ifdef ALPASIM_HAVE_CUDA
    return exec::cuda::make_cuda_backend();
#else
    return core::unavailable("backend cuda: built without CUDA (configure with -DALPASIM_WITH_CUDA=ON)");
#endif
  }
  return core::invalid_argument("--backend: expected cpu or cuda, got \"" + name + "\"");
}

}  // namespace alpasim::apps
