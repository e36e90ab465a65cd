#include "schema/sharding_spec.h"

#include <algorithm>
#include <cctype>

namespace alpasim::schema {

ShardingSpec::ShardingSpec(std::vector<std::vector<int>> mesh_axes_per_tensor_axis)
    : axes_(std::move(mesh_axes_per_tensor_axis)) {
  bool used[2] = {false, false};
  for (const auto& axes : axes_) {
    for (int a : axes) {
      ALPASIM_CHECK(a == 0 || a == 1) << "mesh axis " << a << " of a 2D mesh";
      ALPASIM_CHECK(!used[a]) << "mesh axis " << a << " splits two tensor axes";
      used[a] = true;
    }
  }
}

core::Result<ShardingSpec> ShardingSpec::parse(std::string_view text) {
  auto fail = [&](const std::string& why) {
    return core::invalid_argument("invalid sharding spec \"" + std::string(text) + "\": " + why);
  };
  if (text.empty()) return fail("expected one of R or S<mesh axes> per tensor axis");
  std::vector<std::vector<int>> axes;
  bool used[2] = {false, false};
  std::size_t i = 0;
  while (i < text.size()) {
    char c = text[i++];
    if (c == 'R') {
      axes.emplace_back();
      continue;
    }
    if (c != 'S') return fail(std::string("unexpected '") + c + "'; expected R or S");
    std::vector<int> split;
    while (i < text.size() && (text[i] == '0' || text[i] == '1')) {
      int a = text[i++] - '0';
      if (used[a]) return fail("mesh axis " + std::to_string(a) + " is used twice");
      used[a] = true;
      split.push_back(a);
    }
    if (split.empty()) return fail("S must be followed by mesh axes 0 and/or 1");
    if (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      return fail("a 2D mesh has axes 0 and 1 only");
    }
    axes.push_back(std::move(split));
  }
  return ShardingSpec(std::move(axes));
}

ShardingSpec ShardingSpec::replicated(int rank) {
  return ShardingSpec(std::vector<std::vector<int>>(static_cast<std::size_t>(rank)));
}

bool ShardingSpec::uses_mesh_axis(int mesh_axis) const {
  return std::any_of(axes_.begin(), axes_.end(), [&](const std::vector<int>& a) {
    return std::find(a.begin(), a.end(), mesh_axis) != a.end();
  });
}

bool ShardingSpec::is_replicated() const {
  return std::all_of(axes_.begin(), axes_.end(), [](const auto& a) { return a.empty(); });
}

std::int64_t ShardingSpec::num_shards(std::int64_t rows, std::int64_t cols) const {
  std::int64_t n = 1;
  if (uses_mesh_axis(0)) n *= rows;
  if (uses_mesh_axis(1)) n *= cols;
  return n;
}

std::string ShardingSpec::to_string() const {
  std::string s;
  for (const auto& a : axes_) {
    if (a.empty()) {
      s += 'R';
      continue;
    }
    s += 'S';
    for (int m : a) s += static_cast<char>('0' + m);
  }
  return s;
}

}  // namespace alpasim::schema
