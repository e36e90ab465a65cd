// Reference checks of resharding copy plans (exec/launch/reshard_plan.h) shared by the
// exec_launch tests: the CPU backend's semantics element by element.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "exec/instruction.h"
#include "exec/launch/reshard_plan.h"

namespace alpasim::exec::launch::testing {

using V = std::vector<std::int64_t>;

inline std::int64_t volume(const V& shape) {
  std::int64_t n = 1;
  for (std::int64_t x : shape) n *= x;
  return n;
}

/// Index of global coordinate `g` inside block `b`, or -1 when outside.
inline std::int64_t local_index(const Block& b, const V& g) {
  std::int64_t idx = 0;
  for (std::size_t a = 0; a < g.size(); ++a) {
    if (g[a] < b.offset[a] || g[a] >= b.offset[a] + b.shape[a]) return -1;
    idx = idx * b.shape[a] + (g[a] - b.offset[a]);
  }
  return idx;
}

/// Source member r's value at global coordinate g: distinct per member and element, exact
/// in fp32 (< 2^24).
inline float value(std::int32_t r, const V& global, const V& g) {
  std::int64_t lin = 0;
  for (std::size_t a = 0; a < g.size(); ++a) lin = lin * global[a] + g[a];
  return static_cast<float>(r * 100000 + lin);
}

/// Every global coordinate of `global`, row-major.
inline std::vector<V> coordinates(const V& global) {
  std::vector<V> out;
  V g(global.size(), 0);
  for (std::int64_t k = 0; k < volume(global); ++k) {
    out.push_back(g);
    for (std::size_t a = g.size(); a-- > 0;) {
      if (++g[a] < global[a]) break;
      g[a] = 0;
    }
  }
  return out;
}

inline constexpr float kUntouched = -1.0f;

/// Applies plan_block_copies on host arrays and compares, element by element, with the
/// reference: destination element x of member d holds scale · (value of the highest-ranked
/// source block containing x), or stays kUntouched; each destination element is written at
/// most once (disjoint pieces) and every copy stays inside both buffers.
inline void check_against_reference(const V& global, const std::vector<Block>& src, const std::vector<Block>& dst,
                             float scale) {
  const std::vector<BoxCopy> copies = plan_block_copies(src, dst);
  std::vector<std::vector<float>> sdata(src.size()), ddata(dst.size());
  std::vector<std::vector<int>> writes(dst.size());
  for (std::size_t r = 0; r < src.size(); ++r) sdata[r].assign(static_cast<std::size_t>(volume(src[r].shape)), 0.0f);
  for (std::size_t d = 0; d < dst.size(); ++d) {
    ddata[d].assign(static_cast<std::size_t>(volume(dst[d].shape)), kUntouched);
    writes[d].assign(ddata[d].size(), 0);
  }
  const std::vector<V> all = coordinates(global);
  for (std::size_t r = 0; r < src.size(); ++r) {
    for (const V& g : all) {
      const std::int64_t i = local_index(src[r], g);
      if (i >= 0) sdata[r][static_cast<std::size_t>(i)] = value(static_cast<std::int32_t>(r), global, g);
    }
  }
  for (const BoxCopy& c : copies) {
    INFO(copy_to_text(c));
    REQUIRE(c.source >= 0);
    REQUIRE(static_cast<std::size_t>(c.source) < src.size());
    REQUIRE(c.destination >= 0);
    REQUIRE(static_cast<std::size_t>(c.destination) < dst.size());
    REQUIRE(!c.extent.empty());
    REQUIRE(c.extent.size() <= static_cast<std::size_t>(kMaxCopyAxes));
    CHECK(c.src_stride.back() == 1);  // the innermost axis is a contiguous run on both sides
    CHECK(c.dst_stride.back() == 1);
    // First and last element inside both buffers (strides are positive: these bound all).
    std::int64_t slast = c.src_offset, dlast = c.dst_offset;
    for (std::size_t a = 0; a < c.extent.size(); ++a) {
      REQUIRE(c.extent[a] >= 1);
      slast += (c.extent[a] - 1) * c.src_stride[a];
      dlast += (c.extent[a] - 1) * c.dst_stride[a];
    }
    REQUIRE(c.src_offset >= 0);
    REQUIRE(slast < static_cast<std::int64_t>(sdata[static_cast<std::size_t>(c.source)].size()));
    REQUIRE(c.dst_offset >= 0);
    REQUIRE(dlast < static_cast<std::int64_t>(ddata[static_cast<std::size_t>(c.destination)].size()));
    // Count the writes: a copy of ones into a zero array marks the box.
    const auto d = static_cast<std::size_t>(c.destination);
    std::vector<float> mark(ddata[d].size(), 0.0f);
    const std::vector<float> ones(sdata[static_cast<std::size_t>(c.source)].size(), 1.0f);
    apply_copy_on_host(c, ones.data(), mark.data(), 1.0f);
    for (std::size_t k = 0; k < mark.size(); ++k) writes[d][k] += mark[k] == 1.0f ? 1 : 0;
    apply_copy_on_host(c, sdata[static_cast<std::size_t>(c.source)].data(), ddata[d].data(), scale);
  }
  for (std::size_t d = 0; d < dst.size(); ++d) {
    for (const V& g : all) {
      const std::int64_t i = local_index(dst[d], g);
      if (i < 0) continue;
      float want = kUntouched;
      for (std::size_t r = src.size(); r-- > 0;) {
        if (local_index(src[r], g) >= 0) {
          want = value(static_cast<std::int32_t>(r), global, g) * scale;
          break;
        }
      }
      const auto k = static_cast<std::size_t>(i);
      INFO("destination " << d << " local element " << i);
      CHECK(ddata[d][k] == want);
      CHECK(writes[d][k] == (want == kUntouched ? 0 : 1));
    }
  }
}

/// Blocks of a buffer as reshard_plan reads them (zeros when the buffer has no offsets).
inline Block block_of(const Buffer& b) {
  return {b.block_offset.empty() ? V(b.shape.size(), 0) : b.block_offset, b.shape};
}

/// Every resharding instruction of `p`: its plan is plan_block_copies of the members' buffer
/// blocks and matches the element-by-element reference on them; the plan every member
/// computes from its own instruction (as each NCCL rank does) is the same, so what one
/// rank packs for a peer is what that peer unpacks. Returns how many instructions.
inline int check_program_reshards(const Program& p) {
  int n = 0;
  std::map<std::int64_t, std::vector<std::string>> seen;  // collective id -> the plan's copies
  for (std::size_t d = 0; d < p.code.size(); ++d) {
    for (std::size_t i = 0; i < p.code[d].size(); ++i) {
      if (!is_reshard(p.code[d][i])) continue;
      auto plan = reshard_plan(p, d, i);
      REQUIRE_MESSAGE(plan.ok(), plan.status().message());
      std::vector<Block> src, dst;
      for (std::size_t r = 0; r < plan->group.size(); ++r) {
        src.push_back(block_of(p.buffers[static_cast<std::size_t>(plan->source_buffer[r])]));
        dst.push_back(block_of(p.buffers[static_cast<std::size_t>(plan->destination_buffer[r])]));
      }
      const Buffer& out = p.buffers[static_cast<std::size_t>(p.code[d][i].buffer)];
      const V global = out.global_shape.empty() ? out.shape : out.global_shape;
      CAPTURE(d);
      CAPTURE(i);
      check_against_reference(global, src, dst, plan->scale);
      std::vector<std::string> text;
      for (const BoxCopy& c : plan->copies) text.push_back(copy_to_text(c));
      auto [it, first] = seen.emplace(p.code[d][i].collective_id, text);
      if (!first) CHECK(it->second == text);
      ++n;
    }
  }
  return n;
}

}  // namespace alpasim::exec::launch::testing
