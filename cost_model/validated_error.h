#pragma once

#include <string>
#include <string_view>

#include "core/dtype.h"

namespace alpasim::cost_model {

/// How far this cost model's predictions have been measured to miss published runs, for one
/// GPU kind and training dtype: the mean absolute relative error of a validation table
/// (docs/validation.md). Planning tools turn it into a ± band on predicted times.
struct ValidatedError {
  /// Mean absolute relative error, in [0, 1): 0.093 = predictions miss by 9.3 % on average.
  double relative_error = 0;
  /// False when no published run on this GPU kind and dtype was compared: relative_error is
  /// then the largest of the validated tables (a band, not a measurement).
  bool validated = false;
  /// The table, its size and the test that measures it.
  std::string source;
};

/// The measured error for `gpu` (GpuSpec::name, e.g. "a100-80gb") training in `dtype`, or
/// with the block linears' GEMMs in a Blackwell block-scaled format (`block_scaled` "mxfp8"
/// or "nvfp4", dtype bf16; "" for none). Each figure is checked against the test that
/// measures it (tests/validation/megatron_sc21_validation_test.cc, check_band_covers), so
/// the band cannot drift below the measurement.
ValidatedError validated_error(std::string_view gpu, core::DType dtype,
                               std::string_view block_scaled = "");

}  // namespace alpasim::cost_model
