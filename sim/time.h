#pragma once

#include <cmath>
#include <cstdint>

#include "core/units.h"

namespace alpasim::sim {

/// Simulated time in integer nanoseconds since the start of the iteration. Integer so
/// that event ordering is exact and the same input gives the same timeline bit for bit;
/// int64 covers 292 years, far beyond any iteration.
using Time = std::int64_t;

/// Rounds a duration to the nearest nanosecond (half away from zero). Durations below
/// 0.5 ns become 0. Precondition: `s` is finite and non-negative.
inline Time to_time(core::Seconds s) { return static_cast<Time>(std::llround(s.value() * 1e9)); }

/// Converts simulated nanoseconds back to seconds.
inline core::Seconds to_seconds(Time t) { return core::Seconds(static_cast<double>(t) * 1e-9); }

}  // namespace alpasim::sim
