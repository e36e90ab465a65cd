#pragma once

// Finds and reads the published figures of validation/data (in the repository)
// for the validation-style unit tests of ir/. Fails the test clearly when missing.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace alpasim::ir::testing {

/// ALPASIM_SOURCE_DIR/validation/data/<name>; REQUIREs that it exists.
inline std::filesystem::path reference_file(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::path(ALPASIM_SOURCE_DIR) / "validation" / "data" / name;
  INFO("reference data missing: expected " << p.string()
       << " (published figures carried by the repository; see validation/data/README.md)");
  REQUIRE(std::filesystem::exists(p));
  return p;
}

inline std::filesystem::path data_file(const std::string& name) {
  return std::filesystem::path(ALPASIM_SOURCE_DIR) / "tests" / "data" / "ir" / name;
}

/// Rows of a CSV file with a header, as column -> text (RFC 4180 quoting).
inline std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        rows.back().back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        rows.back().back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().emplace_back();
    } else if (c == '\n') {
      rows.emplace_back(1);
    } else if (c != '\r') {
      rows.back().back() += c;
    }
  }
  std::vector<std::map<std::string, std::string>> out;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    if (rows[r].size() != rows[0].size()) continue;  // trailing empty line
    std::map<std::string, std::string> row;
    for (std::size_t c = 0; c < rows[0].size(); ++c) row[rows[0][c]] = rows[r][c];
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace alpasim::ir::testing
