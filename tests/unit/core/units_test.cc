#include "core/units.h"

#include <type_traits>

#include <doctest/doctest.h>

namespace alpasim::core {
namespace {

// A unit mismatch must not compile: Seconds + Bytes has no operator.
template <class A, class B>
concept Addable = requires(A a, B b) { a + b; };
static_assert(Addable<Seconds, Seconds>);
static_assert(!Addable<Seconds, Bytes>);
static_assert(!std::is_default_constructible_v<Seconds>);
static_assert(!std::is_convertible_v<double, Seconds>);

TEST_CASE("units convert exactly where the arithmetic is closed-form") {
  // 1 GiB over 100 GB/s: 2^30 / 1e11 s.
  Seconds t = gib(1) / gbyte_per_s(100);
  CHECK(t.value() == doctest::Approx(1073741824.0 / 1e11).epsilon(1e-15));
  // 25 Gbit/s is 3.125 GB/s (bits vs bytes, the classic what-if mistake).
  CHECK(gbit_per_s(25).value() == doctest::Approx(3.125e9));
  // 312 TFLOP/s for 624 TFLOP takes 2 s.
  CHECK((Flops(624e12) / tflops_per_s(312)).value() == doctest::Approx(2.0));
  CHECK(to_gib(gib(3)) == 3.0);
  CHECK(to_ms(milliseconds(7.5)) == doctest::Approx(7.5));
  CHECK((gib(2) / gib(1)) == 2.0);
  CHECK(mib(1) + kib(1024) == mib(2));
  CHECK(seconds(1) < seconds(2));
}

}  // namespace
}  // namespace alpasim::core
