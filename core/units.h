#pragma once

#include <compare>
#include <cstdint>

namespace alpasim::core {

/// A number with a unit in its type. Construction is explicit, there is no default
/// constructor, and arithmetic is limited to what keeps the unit right: adding two
/// Seconds gives Seconds, dividing Bytes by BytesPerSecond gives Seconds, and adding
/// Seconds to Bytes does not compile. Raw numbers leave through value().
template <class Tag, class Rep>
class Quantity {
 public:
  using rep = Rep;
  constexpr explicit Quantity(Rep value) : value_(value) {}
  constexpr Rep value() const { return value_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(value_ + o.value_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(value_ - o.value_); }
  constexpr Quantity& operator+=(Quantity o) { value_ += o.value_; return *this; }
  constexpr Quantity& operator-=(Quantity o) { value_ -= o.value_; return *this; }
  constexpr Quantity operator*(Rep k) const { return Quantity(value_ * k); }
  constexpr Quantity operator/(Rep k) const { return Quantity(value_ / k); }
  friend constexpr Quantity operator*(Rep k, Quantity q) { return Quantity(k * q.value_); }
  /// The dimensionless ratio of two quantities of the same unit.
  constexpr double operator/(Quantity o) const {
    return static_cast<double>(value_) / static_cast<double>(o.value_);
  }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  Rep value_;
};

struct SecondsTag {};
struct BytesTag {};
struct FlopsTag {};
struct FlopsPerSecondTag {};
struct BytesPerSecondTag {};

/// Wall-clock or simulated duration in seconds.
using Seconds = Quantity<SecondsTag, double>;
/// A memory or message size in bytes; an integer so memory accounting is exact.
using Bytes = Quantity<BytesTag, std::int64_t>;
/// A count of floating-point operations (a double: 175B-model iterations exceed 2^63).
using Flops = Quantity<FlopsTag, double>;
/// Compute throughput in FLOP/s.
using FlopsPerSecond = Quantity<FlopsPerSecondTag, double>;
/// Bandwidth in bytes/s (not bits: network links are converted on input from *_gbit_per_s).
using BytesPerSecond = Quantity<BytesPerSecondTag, double>;

constexpr Seconds operator/(Bytes b, BytesPerSecond bw) {
  return Seconds(static_cast<double>(b.value()) / bw.value());
}
constexpr Seconds operator/(Flops f, FlopsPerSecond r) { return Seconds(f.value() / r.value()); }
constexpr FlopsPerSecond operator/(Flops f, Seconds t) { return FlopsPerSecond(f.value() / t.value()); }
constexpr BytesPerSecond operator/(Bytes b, Seconds t) {
  return BytesPerSecond(static_cast<double>(b.value()) / t.value());
}

// Named constructors for the units that appear in files and reports. Decimal prefixes
// (1 GB/s = 1e9 B/s) except the binary ones spelled gib/mib/kib.
constexpr Seconds seconds(double s) { return Seconds(s); }
constexpr Seconds milliseconds(double ms) { return Seconds(ms * 1e-3); }
constexpr Seconds microseconds(double us) { return Seconds(us * 1e-6); }
constexpr Bytes bytes(std::int64_t b) { return Bytes(b); }
constexpr Bytes kib(std::int64_t n) { return Bytes(n << 10); }
constexpr Bytes mib(std::int64_t n) { return Bytes(n << 20); }
constexpr Bytes gib(std::int64_t n) { return Bytes(n << 30); }
constexpr BytesPerSecond gbyte_per_s(double x) { return BytesPerSecond(x * 1e9); }
constexpr BytesPerSecond gbit_per_s(double x) { return BytesPerSecond(x * 1e9 / 8.0); }
constexpr FlopsPerSecond tflops_per_s(double x) { return FlopsPerSecond(x * 1e12); }

constexpr double to_gib(Bytes b) { return static_cast<double>(b.value()) / (1024.0 * 1024.0 * 1024.0); }
constexpr double to_gbyte_per_s(BytesPerSecond bw) { return bw.value() / 1e9; }
constexpr double to_tflops_per_s(FlopsPerSecond r) { return r.value() / 1e12; }
constexpr double to_ms(Seconds t) { return t.value() * 1e3; }
constexpr double to_us(Seconds t) { return t.value() * 1e6; }

}  // namespace alpasim::core
