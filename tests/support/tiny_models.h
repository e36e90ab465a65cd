// Small models shared by the planner and executor tests: small enough for exhaustive checks
// and real fp32 arithmetic on the CPU backend.
#pragma once

#include "ir/model_config.h"

namespace alpasim::testing {

/// Wide-ResNet-50 structure (stem, 16 bottleneck blocks, head: 18 layers) at 8×8 images,
/// 2 base channels and 4 classes: every convolution kind (strided, 1×1, 3×3) in a few KiB.
inline ir::ModelConfig tiny_wide_resnet() {
  ir::WideResNetConfig w;
  w.num_layers = 50;
  w.base_channels = 2;
  w.width_factor = 1;
  w.image_size = 8;
  w.num_classes = 4;
  return {"tiny wide-resnet", w};
}

}  // namespace alpasim::testing
