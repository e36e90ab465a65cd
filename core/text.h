#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace alpasim::core {

/// Levenshtein distance (insert, delete, substitute; each costs 1). O(|a|·|b|).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word` when it is close enough to be a likely typo:
/// one is a prefix of the other (ranked first), or distance ≤ max(2, |word|/3). Ties go to the earlier
/// candidate, so the answer is deterministic.
std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates);

/// `"a", "b" or "c"` for messages that list the allowed choices.
std::string quoted_list(std::span<const std::string> items, std::string_view last_joiner = "or");

/// printf-style "%.*f" that never prints "-0.000" and is locale-independent.
std::string format_fixed(double value, int decimals);

/// format_fixed with thousands separators: 720311.4 with 0 decimals -> "720,311".
std::string format_grouped(double value, int decimals);

/// `text` with control characters written as escapes (\n, \t, \r, \u00XX), for echoing
/// user-supplied names (JSON keys, ONNX node names) in a message that must stay one line.
std::string escape_control_chars(const std::string& text);

/// Human size with binary prefix and fixed decimals: "1.50 GiB", "512 B".
std::string format_bytes(std::int64_t bytes);

/// Count with decimal prefix: 6.65e9 -> "6.65 B" (for parameters), 1.2e6 -> "1.20 M".
std::string format_count(double count);

}  // namespace alpasim::core
