#pragma once

// A closed-form PlanPointFn for the sweep/capacity/report tests, so that they test the
// engines and never the planner:
//   iteration_time_s     = global_batch / num_gpus           (1 s per sequence per GPU)
//   model_tflops_per_gpu = 100 / num_gpus^0 - num_gpus / 4    (falls with scale)
//   peak_memory_bytes    = 64 GiB / num_gpus                 (fits from 1 GPU on 80 GB parts)
// with two pipeline stages (the second holding half, a quarter of each parameters) and a
// two-task timeline.
#include <cstdint>

#include "driver/plan_point.h"

namespace alpasim::driver::testing {

inline core::Result<PointResult> fake_plan(const Scenario& s) {
  const std::int64_t n = s.cluster.num_gpus();
  constexpr std::int64_t kGib = 1024LL * 1024 * 1024;
  PointResult p;
  p.plan_summary = "fake, " + std::to_string(n) + " GPUs";  // a comma: CSV must quote it
  p.iteration_time_s = static_cast<double>(s.training.global_batch_size) / static_cast<double>(n);
  p.model_tflops_per_gpu = 100.0 - static_cast<double>(n) / 4;
  p.hardware_tflops_per_gpu = p.model_tflops_per_gpu;
  p.peak_memory_bytes = 64 * kGib / n;
  p.usable_memory_bytes = s.cluster.usable_memory().value();
  p.fits = p.peak_memory_bytes <= p.usable_memory_bytes;
  p.stage_memory_bytes = {p.peak_memory_bytes, p.peak_memory_bytes / 2};
  // Components: a quarter parameters, three quarters stored activations.
  for (std::int64_t total : p.stage_memory_bytes) {
    p.stage_memory_components_bytes.push_back({total / 4, 0, 0, total - total / 4, 0});
  }
  p.timeline = {{0, "forward", 0, 0.0, 0.5}, {1, "forward", 0, 0.5, 1.0}};
  p.timeline_microbatches = 1;
  p.stage_busy = {{0, "forward", 0.5}, {1, "forward", 0.5}};
  return p;
}

}  // namespace alpasim::driver::testing
