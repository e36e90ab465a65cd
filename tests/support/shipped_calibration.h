// The shipped profiles (profiles/), calibrated once per test executable. Tests that price
// plans with the real cost model share this instead of re-calibrating (≈ 50 ms each time).
#pragma once

#include <map>
#include <string>

#include "cost_model/calibration.h"

namespace alpasim::testing {

/// Calibrations of every shipped profile, by machine name; aborts (via value()) when the
/// shipped profiles do not calibrate, which the cost-model tests report in detail.
inline const std::map<std::string, cost_model::Calibration>& shipped_calibrations() {
  static const auto calibrations =
      cost_model::calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles").value();
  return calibrations;
}

}  // namespace alpasim::testing
