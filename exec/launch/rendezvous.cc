#include "exec/launch/rendezvous.h"

#include "exec/launch/reshard_plan.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace alpasim::exec::launch {
namespace {

std::string hex(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%a", v);
  return b;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool parse_i64(const std::string& s, std::int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

}  // namespace

std::string rendezvous_path(const RankEnv& env, const std::string& name) {
  return env.rendezvous_dir + "/" + env.run_id + "." + name;
}

core::Status publish_file(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return core::unavailable(tmp + ": cannot create (" + std::strerror(errno) + ")");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) return core::unavailable(tmp + ": cannot write (" + std::strerror(errno) + ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return core::unavailable(path + ": cannot rename " + tmp + " to it (" + why + ")");
  }
  return core::ok_status();
}

core::Result<std::string> wait_for_file(const std::string& path, double timeout_s, double interval_s, Clock& clock) {
  std::string bytes;
  auto st = poll_until(
      [&](std::string*) {
        std::ifstream f(path, std::ios::binary);
        if (!f) return PollState::kPending;
        std::ostringstream s;
        s << f.rdbuf();
        bytes = s.str();
        return PollState::kDone;
      },
      timeout_s, interval_s, clock, path);
  if (!st.ok()) return core::unavailable(st.message() + " (did rank 0 start? is the folder shared by every rank?)");
  return bytes;
}

std::string encode_blobs(const std::vector<std::string>& blobs) {
  std::string out = "alpasim-blobs 1 " + std::to_string(blobs.size()) + "\n";
  for (const auto& b : blobs) out += std::to_string(b.size()) + "\n" + b;
  return out;
}

core::Result<std::vector<std::string>> decode_blobs(const std::string& bytes, std::int64_t expected_count,
                                                    const std::string& what) {
  std::size_t pos = bytes.find('\n');
  const std::string head = pos == std::string::npos ? bytes.substr(0, 40) : bytes.substr(0, pos);
  const auto w = words(head);
  std::int64_t count = 0;
  if (w.size() != 3 || w[0] != "alpasim-blobs" || w[1] != "1" || !parse_i64(w[2], &count) || count < 0) {
    return core::invalid_argument(what + ": expected a header \"alpasim-blobs 1 <count>\", got \"" + head + "\"");
  }
  if (expected_count >= 0 && count != expected_count) {
    return core::invalid_argument(what + ": expected " + std::to_string(expected_count) + " blobs, got " +
                                  std::to_string(count));
  }
  std::vector<std::string> out;
  ++pos;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::size_t nl = bytes.find('\n', pos);
    std::int64_t size = 0;
    if (nl == std::string::npos || !parse_i64(bytes.substr(pos, nl - pos), &size) || size < 0 ||
        nl + 1 + static_cast<std::size_t>(size) > bytes.size()) {
      return core::invalid_argument(what + ": expected blob " + std::to_string(i) + " of " + std::to_string(count) +
                                    ", got a truncated file (" + std::to_string(bytes.size()) + " bytes)");
    }
    out.push_back(bytes.substr(nl + 1, static_cast<std::size_t>(size)));
    pos = nl + 1 + static_cast<std::size_t>(size);
  }
  if (pos != bytes.size()) {
    return core::invalid_argument(what + ": expected the end of the file after " + std::to_string(count) +
                                  " blobs, got " + std::to_string(bytes.size() - pos) + " more bytes");
  }
  return out;
}

std::string encode_rank_result(const RankResult& r) {
  std::string s = "alpasim-rank-result 1\nrank " + std::to_string(r.rank) + "\n";
  if (!r.error.empty()) {
    std::string e = r.error;
    for (char& c : e) {
      if (c == '\n') c = ' ';
    }
    s += "error " + e + "\n";
  }
  for (const auto& [id, v] : r.losses) s += "loss " + std::to_string(id) + " " + hex(v) + "\n";
  for (double t : r.iteration_s) s += "iteration " + hex(t) + "\n";
  for (const auto& t : r.timings) {
    s += "timing " + std::to_string(t.device) + " " + std::to_string(t.instruction) + " " + std::to_string(t.start_ns) +
         " " + std::to_string(t.end_ns) + "\n";
  }
  for (const auto* m : {&r.gradients, &r.parameters}) {
    for (const auto& [name, v] : *m) {
      s += std::string(m == &r.gradients ? "gradient " : "parameter ") + name + " " + std::to_string(v.size());
      for (float x : v) s += " " + hex(static_cast<double>(x));
      s += "\n";
    }
  }
  for (const TensorBlock& b : r.blocks) {
    // block <gradient|parameter> <name> <rank> <global...> <offset...> <shape...> <n> <values...>
    s += std::string("block ") + (b.gradient ? "gradient " : "parameter ") + b.name + " " +
         std::to_string(b.global_shape.size());
    for (const auto* v : {&b.global_shape, &b.offset, &b.shape}) {
      for (std::int64_t x : *v) s += " " + std::to_string(x);
    }
    s += " " + std::to_string(b.data.size());
    for (float x : b.data) s += " " + hex(static_cast<double>(x));
    s += "\n";
  }
  return s + "end\n";
}

core::Status place_block(const TensorBlock& b, std::map<std::string, std::vector<float>>* gradients,
                         std::map<std::string, std::vector<float>>* parameters) {
  const std::string what = "tensor block " + b.name + ": expected ";
  const std::size_t r = b.global_shape.size();
  if (b.offset.size() != r || b.shape.size() != r) {
    return core::invalid_argument(what + "offset and shape of rank " + std::to_string(r) + ", got ranks " +
                                  std::to_string(b.offset.size()) + " and " + std::to_string(b.shape.size()));
  }
  std::int64_t whole = 1, n = 1;
  for (std::size_t a = 0; a < r; ++a) {
    if (b.offset[a] < 0 || b.shape[a] < 0 || b.offset[a] + b.shape[a] > b.global_shape[a]) {
      return core::invalid_argument(what + "a block inside the tensor on axis " + std::to_string(a) + ", got [" +
                                    std::to_string(b.offset[a]) + ", " + std::to_string(b.offset[a] + b.shape[a]) +
                                    ") of " + std::to_string(b.global_shape[a]));
    }
    whole *= b.global_shape[a];
    n *= b.shape[a];
  }
  if (static_cast<std::int64_t>(b.data.size()) != n) {
    return core::invalid_argument(what + std::to_string(n) + " values, got " + std::to_string(b.data.size()));
  }
  auto& full = (b.gradient ? *gradients : *parameters)[b.name];
  if (full.empty()) full.assign(static_cast<std::size_t>(whole), 0.0f);
  if (static_cast<std::int64_t>(full.size()) != whole) {
    return core::invalid_argument(what + "a tensor of " + std::to_string(whole) + " elements, got one of " +
                                  std::to_string(full.size()));
  }
  for (const BoxCopy& c : plan_block_copies({{b.offset, b.shape}}, {{std::vector<std::int64_t>(r, 0), b.global_shape}})) {
    apply_copy_on_host(c, b.data.data(), full.data(), 1.0f);
  }
  return core::ok_status();
}

core::Result<RankResult> decode_rank_result(const std::string& text, const std::string& what) {
  RankResult r;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  bool ended = false;
  auto bad = [&](const std::string& expected) {
    return core::invalid_argument(what + ": line " + std::to_string(n) + ": expected " + expected + ", got \"" +
                                  line.substr(0, 80) + "\"");
  };
  while (std::getline(in, line)) {
    ++n;
    if (ended) return bad("nothing after \"end\"");
    if (n == 1) {
      if (line != "alpasim-rank-result 1") return bad("\"alpasim-rank-result 1\"");
      continue;
    }
    if (line.rfind("error ", 0) == 0) {
      r.error = line.substr(6);
      continue;
    }
    const auto w = words(line);
    std::int64_t a = 0, b = 0, c = 0, d = 0;
    double x = 0;
    if (w.size() == 1 && w[0] == "end") {
      ended = true;
    } else if (w.size() == 2 && w[0] == "rank" && parse_i64(w[1], &a)) {
      r.rank = static_cast<std::int32_t>(a);
    } else if (w.size() == 3 && w[0] == "loss" && parse_i64(w[1], &a) && parse_double(w[2], &x)) {
      r.losses[a] = x;
    } else if (w.size() == 2 && w[0] == "iteration" && parse_double(w[1], &x)) {
      r.iteration_s.push_back(x);
    } else if (w.size() == 5 && w[0] == "timing" && parse_i64(w[1], &a) && parse_i64(w[2], &b) &&
               parse_i64(w[3], &c) && parse_i64(w[4], &d)) {
      r.timings.push_back({static_cast<std::int32_t>(a), static_cast<std::int32_t>(b), c, d});
    } else if (w.size() >= 3 && (w[0] == "gradient" || w[0] == "parameter") && parse_i64(w[2], &a) &&
               static_cast<std::int64_t>(w.size()) == 3 + a) {
      std::vector<float> v;
      for (std::size_t i = 3; i < w.size(); ++i) {
        if (!parse_double(w[i], &x)) return bad("a hex float");
        v.push_back(static_cast<float>(x));
      }
      (w[0] == "gradient" ? r.gradients : r.parameters)[w[1]] = std::move(v);
    } else if (w.size() >= 4 && w[0] == "block" && (w[1] == "gradient" || w[1] == "parameter") &&
               parse_i64(w[3], &a) && a >= 0 && static_cast<std::int64_t>(w.size()) >= 5 + 3 * a) {
      TensorBlock blk;
      blk.gradient = w[1] == "gradient";
      blk.name = w[2];
      const auto rank = static_cast<std::size_t>(a);
      for (std::size_t i = 0; i < 3 * rank; ++i) {
        if (!parse_i64(w[4 + i], &c)) return bad("an integer");
        (i < rank ? blk.global_shape : i < 2 * rank ? blk.offset : blk.shape).push_back(c);
      }
      if (!parse_i64(w[4 + 3 * rank], &d) || static_cast<std::int64_t>(w.size()) != 5 + 3 * a + d) {
        return bad("a value count matching the line");
      }
      for (std::size_t i = 5 + 3 * rank; i < w.size(); ++i) {
        if (!parse_double(w[i], &x)) return bad("a hex float");
        blk.data.push_back(static_cast<float>(x));
      }
      r.blocks.push_back(std::move(blk));
    } else {
      return bad("rank, error, loss, iteration, timing, gradient, parameter, block or end");
    }
  }
  if (!ended) {
    line.clear();
    return core::invalid_argument(what + ": expected a last line \"end\", got a truncated file (" +
                                  std::to_string(n) + " lines)");
  }
  return r;
}

core::Result<ExecutionResult> merge_rank_results(const std::vector<RankResult>& ranks, std::int32_t world_size) {
  std::map<std::int32_t, const RankResult*> by_rank;
  for (const auto& r : ranks) {
    if (r.rank < 0 || r.rank >= world_size || !by_rank.emplace(r.rank, &r).second) {
      return core::invalid_argument("rank results: expected each rank in [0, " + std::to_string(world_size) +
                                    ") once, got rank " + std::to_string(r.rank) + " again or out of range");
    }
  }
  for (std::int32_t k = 0; k < world_size; ++k) {
    if (!by_rank.count(k)) {
      return core::invalid_argument("rank results: expected a result from rank " + std::to_string(k) + ", got none");
    }
  }
  for (const auto& [k, r] : by_rank) {
    if (!r->error.empty()) return core::internal_error("rank " + std::to_string(k) + ": " + r->error);
  }
  ExecutionResult out;
  out.backend = "cuda";
  double sum = 0;
  std::size_t count = 0;
  for (const auto& [k, r] : by_rank) {
    for (const auto& [id, v] : r->losses) {
      sum += v;
      ++count;
    }
    for (std::size_t i = 0; i < r->iteration_s.size(); ++i) {
      if (out.iteration_s.size() <= i) out.iteration_s.push_back(0.0);
      out.iteration_s[i] = std::max(out.iteration_s[i], r->iteration_s[i]);
    }
    out.timings.insert(out.timings.end(), r->timings.begin(), r->timings.end());
    for (const auto& [name, v] : r->gradients) {
      if (!out.gradients.emplace(name, v).second) {
        return core::internal_error("rank results: gradient " + name + " reported by two ranks");
      }
    }
    for (const auto& [name, v] : r->parameters) {
      if (!out.parameters.emplace(name, v).second) {
        return core::internal_error("rank results: parameter " + name + " reported by two ranks");
      }
    }
  }
  // Blocks of sharded tensors, in rank order (replicated blocks hold equal values).
  const auto whole_gradients = out.gradients;
  const auto whole_parameters = out.parameters;
  for (const auto& [k, r] : by_rank) {
    for (const TensorBlock& b : r->blocks) {
      if ((b.gradient ? whole_gradients : whole_parameters).count(b.name)) {
        return core::internal_error("rank results: " + std::string(b.gradient ? "gradient " : "parameter ") + b.name +
                                    " reported whole and as blocks");
      }
      ALPASIM_RETURN_IF_ERROR(place_block(b, &out.gradients, &out.parameters).with_context("rank " + std::to_string(k)));
    }
  }
  out.loss = count == 0 ? 0.0 : sum / static_cast<double>(count);
  return out;
}

}  // namespace alpasim::exec::launch
