#include "exec/cuda/microbench/sweep.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "core/check.h"

namespace alpasim::exec::microbench {
namespace {

bool is_power_of_two(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// A uniform double in [0, 1) from 53 random bits (our own mapping, so the sweep is the same
// with every standard library; std::uniform_real_distribution is implementation-defined).
double unit_double(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Log-uniform in [lo, hi], rounded to a multiple of 64 and moved off powers of two (so never
// a grid value), staying inside [lo, hi].
std::int64_t off_grid_dim(std::mt19937_64& rng, double lo, double hi) {
  const double v = std::exp(std::log(lo) + unit_double(rng) * (std::log(hi) - std::log(lo)));
  std::int64_t d = std::llround(v / 64.0) * 64;
  d = std::clamp<std::int64_t>(d, static_cast<std::int64_t>(lo) + 64, static_cast<std::int64_t>(hi) - 64);
  if (is_power_of_two(d)) d += 64;  // 256 -> 320, 1024 -> 1088
  return d;
}

}  // namespace

core::Result<OpSelection> parse_op_selection(const std::string& text) {
  OpSelection sel;
  std::set<std::string> seen;
  std::stringstream ss(text);
  std::string item;
  int count = 0;
  while (std::getline(ss, item, ',')) {
    ++count;
    if (!seen.insert(item).second) {
      return core::invalid_argument("--ops: operator family \"" + item + "\" given twice");
    }
    if (item == "gemm") {
      sel.gemm = true;
    } else if (item == "conv") {
      sel.conv = true;
    } else if (item == "hbm") {
      sel.hbm = true;
    } else if (item == "nccl") {
      sel.nccl = true;
    } else {
      return core::invalid_argument("--ops: unknown operator family \"" + item +
                                    "\" (expected gemm, conv, hbm or nccl)");
    }
  }
  if (count == 0) return core::invalid_argument("--ops: expected gemm, conv, hbm or nccl, got nothing");
  return sel;
}

const char* gemm_set_name(GemmSet s) {
  switch (s) {
    case GemmSet::kGrid: return "grid";
    case GemmSet::kRandom: return "random";
    case GemmSet::kTpSkinny: return "tp_skinny";
    case GemmSet::kBatched: return "batched";
  }
  return "?";
}

std::vector<std::int64_t> gemm_grid_ladder(bool quick) {
  // 128 .. 16384 covers the head dimension (k = 128 of attention scores) up to the 4h/t of a
  // hidden size 8192 at t = 2; the cost model interpolates log(time) inside this grid.
  if (quick) return {128, 1024, 8192};
  return {128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}

std::vector<GemmCase> gemm_sweep(const std::vector<core::DType>& dtypes, bool quick,
                                 std::uint64_t seed) {
  using schema::ProfileRole;
  std::vector<GemmCase> out;
  const auto ladder = gemm_grid_ladder(quick);
  for (core::DType dt : dtypes) {
    for (std::int64_t m : ladder) {
      for (std::int64_t n : ladder) {
        for (std::int64_t k : ladder) out.push_back({m, n, k, 1, dt, GemmSet::kGrid, ProfileRole::kFit});
      }
    }
  }
  std::mt19937_64 rng(seed);
  const std::set<std::int64_t> on_ladder(ladder.begin(), ladder.end());
  // A held-out shape must not be a grid point (it would be a fitted measurement), and is
  // measured once (the MLP GEMMs of one degree can coincide with another's).
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, core::DType>> seen;
  auto add_check = [&](std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch,
                       core::DType dt, GemmSet set) {
    if (batch == 1 && on_ladder.contains(m) && on_ladder.contains(n) && on_ladder.contains(k)) return;
    if (!seen.insert({m, n, k, batch, dt}).second) return;
    out.push_back({m, n, k, batch, dt, set, ProfileRole::kCheck});
  };
  const int random_per_dtype = quick ? 8 : 32;
  for (core::DType dt : dtypes) {
    // Held-out random shapes inside the grid's range, so the check measures interpolation.
    const double lo = static_cast<double>(ladder.front());
    const double hi = static_cast<double>(ladder.back());
    for (int i = 0; i < random_per_dtype; ++i) {
      const std::int64_t m = off_grid_dim(rng, lo, hi);
      const std::int64_t n = off_grid_dim(rng, lo, hi);
      const std::int64_t k = off_grid_dim(rng, lo, hi);
      add_check(m, n, k, 1, dt, GemmSet::kRandom);
    }
    // Megatron tensor parallelism (Shoeybi et al. 2019, section 3) splits the QKV and first
    // MLP GEMM along N and the output projection and second MLP GEMM along K by the degree t.
    // Hidden sizes of GPT-3 1.3B..39B-like models (2048, 5120, 8192) at 4096 or 6144 tokens
    // per microbatch; shapes that land on the grid are skipped by add_check.
    const std::vector<std::int64_t> hiddens = quick ? std::vector<std::int64_t>{5120}
                                                    : std::vector<std::int64_t>{2048, 5120, 8192};
    const std::vector<std::int64_t> tokens = quick ? std::vector<std::int64_t>{6144}
                                                   : std::vector<std::int64_t>{4096, 6144};
    for (std::int64_t h : hiddens) {
      for (std::int64_t t : {2, 4, 8}) {
        for (std::int64_t mt : tokens) {
          add_check(mt, 3 * h / t, h, 1, dt, GemmSet::kTpSkinny);
          add_check(mt, h, h / t, 1, dt, GemmSet::kTpSkinny);
          add_check(mt, 4 * h / t, h, 1, dt, GemmSet::kTpSkinny);
          add_check(mt, h, 4 * h / t, 1, dt, GemmSet::kTpSkinny);
        }
      }
    }
    // Attention: scores Q K^T [b*heads, s, s, d] and context P V [b*heads, s, d, s], head
    // dimension 128, heads per GPU after tensor parallelism.
    // batch * s stays within the grid's m range, where the cost model interpolates.
    const std::vector<std::int64_t> seqs = quick ? std::vector<std::int64_t>{1024}
                                                 : std::vector<std::int64_t>{1024, 2048};
    for (std::int64_t s : seqs) {
      for (std::int64_t b : {3, 6}) {
        add_check(s, s, 128, b, dt, GemmSet::kBatched);
        add_check(s, 128, s, b, dt, GemmSet::kBatched);
      }
    }
  }
  return out;
}

std::vector<ConvCase> conv_sweep(std::int64_t batch, core::DType dtype, bool quick) {
  struct Wrn {
    const char* name;
    std::int64_t layers, base, width;
    bool check;  // held-out config
  };
  // Alpa (OSDI'22) table 8 model specs (validation/data/alpa_models.json table8_wide_resnet):
  // architecture only, no result enters the profile.
  static const Wrn kConfigs[] = {
      {"250M", 50, 160, 2, false}, {"1B", 50, 320, 2, false},  {"2B", 50, 448, 2, true},
      {"4B", 50, 640, 2, false},   {"6.8B", 50, 320, 16, true}, {"13B", 101, 320, 16, false},
  };
  // Key: the convolution; value: the case (first config that has it decides its role, fit
  // configs are visited first so a shared layer is a fit row).
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  std::map<Key, ConvCase> cases;
  std::vector<Key> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (const Wrn& c : kConfigs) {
      if (c.check != (pass == 1)) continue;
      if (quick && std::string(c.name) != "250M" && std::string(c.name) != "1B") continue;
      auto add = [&](std::int64_t in, std::int64_t out_ch, std::int64_t hw, std::int64_t kernel,
                     std::int64_t stride, const std::string& where) {
        const Key key{in, out_ch, hw, kernel, stride};
        if (cases.contains(key)) return;
        ConvCase cc{batch, in, out_ch, hw, hw, kernel, stride, kernel / 2, dtype,
                    std::string("wresnet-") + c.name + " " + where,
                    c.check ? schema::ProfileRole::kCheck : schema::ProfileRole::kFit};
        cases.emplace(key, cc);
        order.push_back(key);
      };
      // Stem: 7x7 stride 2 on 224x224x3, then a stride-2 max pool: stages start at 56x56.
      add(3, c.base, 224, 7, 2, "stem");
      const std::int64_t blocks50[] = {3, 4, 6, 3};
      const std::int64_t blocks101[] = {3, 4, 23, 3};
      const std::int64_t* blocks = c.layers == 50 ? blocks50 : blocks101;
      std::int64_t in = c.base;
      std::int64_t hw = 56;
      for (int i = 0; i < 4; ++i) {
        const std::int64_t f = c.base << i;
        const std::string st = "stage" + std::to_string(i);
        for (std::int64_t j = 0; j < blocks[i]; ++j) {
          const std::int64_t stride = (i > 0 && j == 0) ? 2 : 1;
          add(in, f, hw, 1, 1, st + " conv1");
          add(f, f * c.width, hw, 3, stride, st + " conv2");
          const std::int64_t hw_out = hw / stride;
          add(f * c.width, 4 * f, hw_out, 1, 1, st + " conv3");
          if (in != 4 * f || stride != 1) add(in, 4 * f, hw, 1, stride, st + " proj");
          in = 4 * f;
          hw = hw_out;
        }
      }
    }
  }
  std::vector<ConvCase> out;
  for (const Key& k : order) out.push_back(cases.at(k));
  return out;
}

std::vector<std::int64_t> nccl_sizes(std::int64_t max_bytes, bool quick) {
  std::vector<std::int64_t> out;
  const std::int64_t step = quick ? 4 : 2;
  const std::int64_t cap = quick ? std::min<std::int64_t>(max_bytes, std::int64_t{256} << 20) : max_bytes;
  for (std::int64_t s = 1024; s <= cap; s *= step) out.push_back(s);
  return out;
}

double busbw_factor(const std::string& collective, std::int64_t n) {
  ALPASIM_CHECK(n >= 2) << "a collective needs two ranks, got " << n;
  const double dn = static_cast<double>(n);
  if (collective == "all_reduce") return 2.0 * (dn - 1) / dn;
  if (collective == "all_gather" || collective == "reduce_scatter" || collective == "all_to_all") {
    return (dn - 1) / dn;
  }
  return 1.0;
}

std::vector<GroupPlacement> nccl_groups(const std::vector<int>& host_of_rank) {
  using schema::ProfileRole;
  std::vector<GroupPlacement> out;
  std::map<int, std::vector<int>> ranks_of_host;
  for (std::size_t r = 0; r < host_of_rank.size(); ++r) {
    ranks_of_host[host_of_rank[r]].push_back(static_cast<int>(r));
  }
  if (ranks_of_host.empty()) return out;
  // Within one node (the first): every size, contiguous (fit) and strided (check).
  const std::vector<int>& local = ranks_of_host.begin()->second;
  const int per_node = static_cast<int>(local.size());
  for (int g = 2; g <= per_node; ++g) {
    out.push_back({std::vector<int>(local.begin(), local.begin() + g), 1, "contiguous",
                   ProfileRole::kFit});
    const int stride = per_node / g;
    if (stride >= 2) {
      std::vector<int> r;
      for (int i = 0; i < g; ++i) r.push_back(local[static_cast<std::size_t>(i * stride)]);
      out.push_back({r, 1, "strided", ProfileRole::kCheck});
    }
  }
  // Across nodes: k nodes x g GPUs each (same g on every node, as the cost model assumes).
  const int nodes = static_cast<int>(ranks_of_host.size());
  int min_per_node = per_node;
  for (const auto& [h, r] : ranks_of_host) min_per_node = std::min(min_per_node, static_cast<int>(r.size()));
  for (int k = 2; k <= nodes; ++k) {
    for (int g = 1; g <= min_per_node; g *= 2) {
      std::vector<int> r;
      int taken = 0;
      for (const auto& [h, rs] : ranks_of_host) {
        if (taken++ == k) break;
        r.insert(r.end(), rs.begin(), rs.begin() + g);
      }
      out.push_back({r, k, g == 1 ? "one-per-node" : "contiguous",
                     g == 1 ? ProfileRole::kCheck : ProfileRole::kFit});
    }
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::optional<std::string> gpu_spec_name_for_device(const std::string& device_name,
                                                    std::int64_t memory_bytes) {
  const auto has = [&](const char* s) { return device_name.find(s) != std::string::npos; };
  const std::int64_t gib = std::int64_t{1} << 30;
  if (has("B200")) return "b200";  // "NVIDIA B200"; GB200's B200 has more memory and clocks
  if (has("H200")) return "h200";
  if (has("H100")) return "h100-sxm";  // PCIe/NVL parts differ in clocks: the fit absorbs it
  if (has("A100")) return memory_bytes > 48 * gib ? "a100-80gb" : "a100-40gb";
  if (has("V100")) return memory_bytes > 24 * gib ? "v100-32gb" : "v100-16gb";
  return std::nullopt;
}

std::optional<std::string> preset_for_gpu(const std::string& gpu_spec_name) {
  static const std::map<std::string, std::string> kPreset = {
      {"a100-40gb", "dgx-a100-40gb"}, {"a100-80gb", "dgx-a100-80gb"}, {"h100-sxm", "dgx-h100"},
      {"h200", "hgx-h200"},           {"v100-16gb", "aws-p3.16xlarge"}, {"b200", "dgx-b200"},
  };
  auto it = kPreset.find(gpu_spec_name);
  if (it == kPreset.end()) return std::nullopt;
  return it->second;
}

std::string default_profile_path(const std::string& machine, const std::string& date) {
  return "profiles/" + machine + "/" + date + "-measured.json";
}

}  // namespace alpasim::exec::microbench
