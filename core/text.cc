#include "core/text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace alpasim::core {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      std::size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  for (const std::string& candidate : candidates) {
    bool prefix = !word.empty() && (candidate.starts_with(word) || word.starts_with(candidate));
    // A truncated or extended word is the likeliest intent: rank it as distance 0.
    std::size_t d = prefix ? 0 : edit_distance(word, candidate);
    if (d > limit) continue;
    if (!best || d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

std::string quoted_list(std::span<const std::string> items, std::string_view last_joiner) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) {
      if (i + 1 == items.size()) {
        out += items.size() > 2 ? ", " : " ";
        out += last_joiner;
        out += " ";
      } else {
        out += ", ";
      }
    }
    out += '"';
    out += items[i];
    out += '"';
  }
  return out;
}

std::string format_fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  std::string s(buffer);
  // "-0.00" is a rounding artefact; print it as zero so outputs do not flip sign.
  if (s.starts_with('-') && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string format_grouped(double value, int decimals) {
  std::string s = format_fixed(value, decimals);
  if (!std::isfinite(value)) return s;
  const std::size_t begin = s.starts_with('-') ? 1 : 0;
  std::size_t end = s.find('.');
  if (end == std::string::npos) end = s.size();
  // Insert from the right so earlier positions stay valid.
  for (std::size_t digits = end - begin; digits > 3; digits -= 3) {
    s.insert(begin + digits - 3, 1, ',');
  }
  return s;
}

std::string escape_control_chars(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += ch;
    }
  }
  return out;
}

std::string format_bytes(std::int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(v) >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  if (unit == 0) return std::to_string(bytes) + " B";
  return format_fixed(v, 2) + " " + kUnits[unit];
}

std::string format_count(double count) {
  static constexpr struct {
    double scale;
    const char* suffix;
  } kPrefixes[] = {{1e12, " T"}, {1e9, " B"}, {1e6, " M"}, {1e3, " K"}};
  for (const auto& p : kPrefixes) {
    if (std::fabs(count) >= p.scale) return format_fixed(count / p.scale, 2) + p.suffix;
  }
  return format_fixed(count, 0);
}

}  // namespace alpasim::core
