#pragma once

#include <memory>

#include "exec/backend.h"

namespace alpasim::exec::cpu {

/// The reference backend: one thread per device, fp32 tensors in host memory, point-to-point
/// transfers through a shared mailbox and collectives through a shared-memory rendezvous
/// (sums in rank order, so results are deterministic). Always built.
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace alpasim::exec::cpu
