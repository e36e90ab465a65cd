#include "schema/profile.h"

#include <tuple>
#include <utility>

#include "core/text.h"

namespace alpasim::schema {
namespace {

using core::JsonObject;
using core::JsonValue;
using core::Result;
using core::Status;

const std::vector<std::string>& source_names() {
  static const std::vector<std::string> k = {"measured", "derived"};
  return k;
}
const std::vector<std::string>& role_names() {
  static const std::vector<std::string> k = {"fit", "check"};
  return k;
}
const std::vector<std::string>& collective_names() {
  static const std::vector<std::string> k = {"all_reduce", "all_gather", "reduce_scatter",
                                             "all_to_all", "broadcast",  "send_recv"};
  return k;
}
const std::vector<std::string>& algorithm_names() {
  static const std::vector<std::string> k = {"default", "ring", "tree", "nvls"};
  return k;
}
const std::vector<std::string>& protocol_names() {
  static const std::vector<std::string> k = {"default", "ll", "ll128", "simple"};
  return k;
}
const std::vector<std::string>& link_class_names() {
  static const std::vector<std::string> k = {"nvlink",     "nvswitch", "pcie",
                                             "infiniband", "ethernet", "efa"};
  return k;
}

const std::vector<std::string>& measurement_names() {
  static const std::vector<std::string> k = {"p2p", "collective"};
  return k;
}

Result<std::string> non_empty_string(JsonObject& obj, std::string_view key) {
  ALPASIM_ASSIGN_OR_RETURN(JsonValue v, obj.required(key, "a non-empty string"));
  ALPASIM_ASSIGN_OR_RETURN(std::string s, v.as_string());
  if (s.empty()) return v.type_error("a non-empty string");
  return s;
}

Result<core::DType> get_dtype(JsonObject& obj) {
  ALPASIM_ASSIGN_OR_RETURN(std::string name, obj.get_enum("dtype", core::dtype_names()));
  return *core::parse_dtype(name);
}

Result<ProfileEntryMeta> parse_meta(JsonObject& obj, ProfileSource default_source) {
  ProfileEntryMeta meta;
  ALPASIM_ASSIGN_OR_RETURN(std::string role, obj.get_enum("role", role_names()));
  meta.role = role == "fit" ? ProfileRole::kFit : ProfileRole::kCheck;
  ALPASIM_ASSIGN_OR_RETURN(std::string source,
                           obj.get_enum_or("source", source_names(),
                                           profile_source_name(default_source)));
  meta.source = source == "measured" ? ProfileSource::kMeasured : ProfileSource::kDerived;
  ALPASIM_ASSIGN_OR_RETURN(meta.citation, non_empty_string(obj, "citation"));
  return meta;
}

// Physical bounds of a measurement (issue 18): values outside them are typos or unit
// mistakes, and one of them reaching a fit makes it non-finite or absurd.
// A kernel or collective time: at least 1 ns (nothing on a GPU completes faster; a launch
// alone takes microseconds), at most 1e9 us (1,000 s).
constexpr double kMinTimeUs = 1e-3;
constexpr double kMaxTimeUs = 1e9;
constexpr std::string_view kTimeRange = "a time in [0.001, 1e9] us";
// A GPU's matmul rate: at most 100,000 TFLOP/s, over 6x the densest datasheet peak (B300
// NVFP4, 15,000 TFLOP/s dense).
constexpr double kMaxTflops = 1e5;
// A link or bus bandwidth: at most 100,000 GB/s, over 10x any NVLink or HBM figure (NVLink 5:
// 1,800 GB/s per GPU; HBM3e: 8,000 GB/s).
constexpr double kMaxGbytePerS = 1e5;
constexpr std::string_view kBandwidthRange = "a bandwidth in (0, 1e5] GB/s";
// A GEMM or convolution dimension: at most 2^31 (cuBLAS and cuDNN take 32-bit sizes).
constexpr std::int64_t kMaxDim = std::int64_t{1} << 31;
constexpr std::string_view kDimRange = "an integer in [1, 2147483648]";

Result<double> time_us(const JsonValue& v) { return v.as_number(kMinTimeUs, kMaxTimeUs, kTimeRange); }
Result<double> bandwidth(const JsonValue& v) {
  ALPASIM_ASSIGN_OR_RETURN(double x, v.as_number(0.0, kMaxGbytePerS, kBandwidthRange));
  if (x <= 0) return v.type_error(kBandwidthRange);
  return x;
}
Result<std::int64_t> dim(JsonObject& obj, std::string_view key) {
  return obj.get_int_in(key, 1, kMaxDim, kDimRange);
}

Result<ProfileProvenance> parse_provenance(JsonObject obj) {
  ProfileProvenance p;
  ALPASIM_ASSIGN_OR_RETURN(p.machine, non_empty_string(obj, "machine"));
  ALPASIM_ASSIGN_OR_RETURN(p.gpu, non_empty_string(obj, "gpu"));
  ALPASIM_ASSIGN_OR_RETURN(p.driver_version, non_empty_string(obj, "driver_version"));
  ALPASIM_ASSIGN_OR_RETURN(p.cuda_version, non_empty_string(obj, "cuda_version"));
  ALPASIM_ASSIGN_OR_RETURN(p.cublas_version, non_empty_string(obj, "cublas_version"));
  ALPASIM_ASSIGN_OR_RETURN(p.cudnn_version, non_empty_string(obj, "cudnn_version"));
  ALPASIM_ASSIGN_OR_RETURN(p.nccl_version, non_empty_string(obj, "nccl_version"));
  ALPASIM_ASSIGN_OR_RETURN(p.date, non_empty_string(obj, "date"));
  ALPASIM_ASSIGN_OR_RETURN(p.measured_by, non_empty_string(obj, "measured_by"));
  ALPASIM_ASSIGN_OR_RETURN(std::string source, obj.get_enum("source", source_names()));
  p.source = source == "measured" ? ProfileSource::kMeasured : ProfileSource::kDerived;
  if (p.source == ProfileSource::kDerived) {
    ALPASIM_ASSIGN_OR_RETURN(p.citation, non_empty_string(obj, "citation"));
  } else {
    ALPASIM_ASSIGN_OR_RETURN(p.citation, obj.get_string_or("citation", ""));
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return p;
}

Result<GemmEntry> parse_gemm(JsonObject obj, ProfileSource src) {
  GemmEntry e;
  ALPASIM_ASSIGN_OR_RETURN(e.m, dim(obj, "m"));
  ALPASIM_ASSIGN_OR_RETURN(e.n, dim(obj, "n"));
  ALPASIM_ASSIGN_OR_RETURN(e.k, dim(obj, "k"));
  if (obj.optional("batch")) {
    ALPASIM_ASSIGN_OR_RETURN(e.batch, dim(obj, "batch"));
  } else {
    e.batch = 1;
  }
  ALPASIM_ASSIGN_OR_RETURN(e.dtype, get_dtype(obj));
  const double flops = 2.0 * static_cast<double>(e.m) * static_cast<double>(e.n) *
                       static_cast<double>(e.k) * static_cast<double>(e.batch);
  auto time = obj.optional("time_us");
  auto rate = obj.optional("tflops_per_s");
  if (time.has_value() == rate.has_value()) {
    return obj.value().error("expected exactly one of \"time_us\" and \"tflops_per_s\"");
  }
  if (time) {
    ALPASIM_ASSIGN_OR_RETURN(e.time_us, time_us(*time));
    e.tflops_per_s = flops / (e.time_us * 1e-6) / 1e12;
    if (e.tflops_per_s > kMaxTflops) {
      return time->error("a time of " + core::format_fixed(e.time_us, 6) + " us for this GEMM means " +
                         core::format_fixed(e.tflops_per_s, 0) +
                         " TFLOP/s, above the physical bound of 100000 TFLOP/s per GPU");
    }
  } else {
    ALPASIM_ASSIGN_OR_RETURN(e.tflops_per_s, rate->as_number(0.0, kMaxTflops, "a rate in (0, 1e5] TFLOP/s"));
    if (e.tflops_per_s <= 0) return rate->type_error("a rate in (0, 1e5] TFLOP/s");
    e.time_us = flops / (e.tflops_per_s * 1e12) * 1e6;
  }
  ALPASIM_ASSIGN_OR_RETURN(e.meta, parse_meta(obj, src));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return e;
}

Result<ConvEntry> parse_conv(JsonObject obj, ProfileSource src) {
  ConvEntry e;
  ALPASIM_ASSIGN_OR_RETURN(e.batch, obj.get_positive_int("batch"));
  ALPASIM_ASSIGN_OR_RETURN(e.in_channels, obj.get_positive_int("in_channels"));
  ALPASIM_ASSIGN_OR_RETURN(e.out_channels, obj.get_positive_int("out_channels"));
  ALPASIM_ASSIGN_OR_RETURN(e.height, obj.get_positive_int("height"));
  ALPASIM_ASSIGN_OR_RETURN(e.width, obj.get_positive_int("width"));
  ALPASIM_ASSIGN_OR_RETURN(e.kernel_h, obj.get_positive_int("kernel_h"));
  ALPASIM_ASSIGN_OR_RETURN(e.kernel_w, obj.get_positive_int("kernel_w"));
  ALPASIM_ASSIGN_OR_RETURN(e.stride, obj.get_positive_int_or("stride", 1));
  ALPASIM_ASSIGN_OR_RETURN(e.padding, obj.get_non_negative_int_or("padding", 0));
  ALPASIM_ASSIGN_OR_RETURN(e.dtype, get_dtype(obj));
  {
    ALPASIM_ASSIGN_OR_RETURN(JsonValue t, obj.required("time_us", kTimeRange));
    ALPASIM_ASSIGN_OR_RETURN(e.time_us, time_us(t));
  }
  ALPASIM_ASSIGN_OR_RETURN(e.meta, parse_meta(obj, src));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return e;
}

Result<CollectiveEntry> parse_collective(JsonObject obj, ProfileSource src) {
  CollectiveEntry e;
  ALPASIM_ASSIGN_OR_RETURN(e.collective, obj.get_enum("collective", collective_names()));
  ALPASIM_ASSIGN_OR_RETURN(e.algorithm, obj.get_enum_or("algorithm", algorithm_names(), "default"));
  ALPASIM_ASSIGN_OR_RETURN(e.protocol, obj.get_enum_or("protocol", protocol_names(), "default"));
  ALPASIM_ASSIGN_OR_RETURN(e.channels, obj.get_non_negative_int_or("channels", 0));
  ALPASIM_ASSIGN_OR_RETURN(e.num_gpus, obj.get_int_in("num_gpus", 2, 1 << 20,
                                                      "an integer in [2, 1048576]"));
  ALPASIM_ASSIGN_OR_RETURN(e.num_nodes, obj.get_positive_int("num_nodes"));
  ALPASIM_ASSIGN_OR_RETURN(e.message_bytes, obj.get_non_negative_int_or("message_bytes", 0));
  if (auto t = obj.optional("time_us")) {
    ALPASIM_ASSIGN_OR_RETURN(double v, time_us(*t));
    e.time_us = v;
  }
  if (auto b = obj.optional("busbw_gbyte_per_s")) {
    ALPASIM_ASSIGN_OR_RETURN(double v, bandwidth(*b));
    e.busbw_gbyte_per_s = v;
  }
  if (!e.time_us && !e.busbw_gbyte_per_s) {
    return obj.value().error("expected \"time_us\" or \"busbw_gbyte_per_s\" (or both)");
  }
  if (e.message_bytes == 0 && !e.busbw_gbyte_per_s) {
    return obj.value().error(
        "an entry without \"message_bytes\" (a large-message asymptote) needs "
        "\"busbw_gbyte_per_s\"");
  }
  ALPASIM_ASSIGN_OR_RETURN(e.meta, parse_meta(obj, src));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return e;
}

Result<LinkEntry> parse_link(JsonObject obj, ProfileSource src) {
  LinkEntry e;
  ALPASIM_ASSIGN_OR_RETURN(e.link_class, obj.get_enum("link_class", link_class_names()));
  ALPASIM_ASSIGN_OR_RETURN(e.measurement, obj.get_enum("measurement", measurement_names()));
  for (auto [key, out] : {std::pair<std::string_view, double*>{"spec_gbyte_per_s", &e.spec_gbyte_per_s},
                          std::pair<std::string_view, double*>{"achieved_gbyte_per_s", &e.achieved_gbyte_per_s}}) {
    ALPASIM_ASSIGN_OR_RETURN(JsonValue v, obj.required(key, kBandwidthRange));
    ALPASIM_ASSIGN_OR_RETURN(*out, bandwidth(v));
  }
  ALPASIM_ASSIGN_OR_RETURN(e.meta, parse_meta(obj, src));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return e;
}

Result<AttentionEntry> parse_attention(JsonObject obj, ProfileSource src) {
  AttentionEntry e;
  ALPASIM_ASSIGN_OR_RETURN(e.batch, dim(obj, "batch"));
  ALPASIM_ASSIGN_OR_RETURN(e.heads, dim(obj, "heads"));
  ALPASIM_ASSIGN_OR_RETURN(e.kv_heads, obj.get_int_in("kv_heads", 1, e.heads, "an integer in [1, heads]"));
  if (e.heads % e.kv_heads != 0) {
    ALPASIM_ASSIGN_OR_RETURN(JsonValue v, obj.required("kv_heads", "a divisor of heads"));
    return v.error("expected a divisor of heads (" + std::to_string(e.heads) + "), got " +
                   std::to_string(e.kv_heads));
  }
  ALPASIM_ASSIGN_OR_RETURN(e.seq, dim(obj, "seq"));
  ALPASIM_ASSIGN_OR_RETURN(e.head_dim, dim(obj, "head_dim"));
  if (obj.optional("v_head_dim")) {
    ALPASIM_ASSIGN_OR_RETURN(e.v_head_dim, dim(obj, "v_head_dim"));
  } else {
    e.v_head_dim = e.head_dim;
  }
  ALPASIM_ASSIGN_OR_RETURN(e.causal, obj.get_bool_or("causal", true));
  ALPASIM_ASSIGN_OR_RETURN(e.dtype, get_dtype(obj));
  ALPASIM_ASSIGN_OR_RETURN(e.kernel, non_empty_string(obj, "kernel"));
  // The forward's multiply-adds, every tile (an upper bound of what a causal kernel does):
  // a time that implies more than the physical bound of any GPU is a typo or a unit mistake.
  const double forward_flops = 2.0 * static_cast<double>(e.batch) * static_cast<double>(e.heads) *
                               static_cast<double>(e.seq) * static_cast<double>(e.seq) *
                               static_cast<double>(e.head_dim + e.v_head_dim);
  for (auto [key, out, flops] : {std::tuple<std::string_view, double*, double>{"forward_us", &e.forward_us, forward_flops},
                                 std::tuple<std::string_view, double*, double>{"backward_us", &e.backward_us,
                                                                               2.5 * forward_flops}}) {
    ALPASIM_ASSIGN_OR_RETURN(JsonValue v, obj.required(key, kTimeRange));
    ALPASIM_ASSIGN_OR_RETURN(*out, time_us(v));
    const double tflops = flops / (*out * 1e-6) / 1e12;
    if (tflops > kMaxTflops) {
      return v.error("a time of " + core::format_fixed(*out, 6) + " us for this attention kernel means up to " +
                     core::format_fixed(tflops, 0) + " TFLOP/s, above the physical bound of 100000 TFLOP/s per GPU");
    }
  }
  ALPASIM_ASSIGN_OR_RETURN(e.meta, parse_meta(obj, src));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return e;
}

template <class T, class Fn>
Status parse_list(JsonObject& obj, std::string_view key, std::vector<T>& out, Fn fn) {
  auto v = obj.optional(key);
  if (!v) return core::ok_status();
  ALPASIM_ASSIGN_OR_RETURN(std::vector<JsonValue> items, v->as_array());
  for (const JsonValue& item : items) {
    ALPASIM_ASSIGN_OR_RETURN(JsonObject o, item.as_object());
    ALPASIM_ASSIGN_OR_RETURN(T entry, fn(std::move(o)));
    out.push_back(std::move(entry));
  }
  return core::ok_status();
}

core::Json meta_json(core::Json j, const ProfileEntryMeta& m) {
  j["role"] = profile_role_name(m.role);
  j["source"] = profile_source_name(m.source);
  j["citation"] = m.citation;
  return j;
}

}  // namespace

const char* profile_source_name(ProfileSource s) {
  return s == ProfileSource::kMeasured ? "measured" : "derived";
}
const char* profile_role_name(ProfileRole r) { return r == ProfileRole::kFit ? "fit" : "check"; }

Result<Profile> parse_profile(const JsonValue& root) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, root.as_object());
  Profile p;
  ALPASIM_ASSIGN_OR_RETURN(JsonValue version, obj.required("schema_version", "an integer"));
  ALPASIM_ASSIGN_OR_RETURN(p.schema_version,
                           version.as_int(kProfileSchemaVersion, kProfileSchemaVersion,
                                          "schema_version " +
                                              std::to_string(kProfileSchemaVersion)));
  ALPASIM_ASSIGN_OR_RETURN(JsonObject prov, obj.get_object("provenance"));
  ALPASIM_ASSIGN_OR_RETURN(p.provenance, parse_provenance(std::move(prov)));
  const ProfileSource src = p.provenance.source;
  ALPASIM_RETURN_IF_ERROR(parse_list(obj, "gemm", p.gemm,
                                     [&](JsonObject o) { return parse_gemm(std::move(o), src); }));
  ALPASIM_RETURN_IF_ERROR(parse_list(obj, "conv", p.conv,
                                     [&](JsonObject o) { return parse_conv(std::move(o), src); }));
  ALPASIM_RETURN_IF_ERROR(parse_list(obj, "collectives", p.collectives, [&](JsonObject o) {
    return parse_collective(std::move(o), src);
  }));
  ALPASIM_RETURN_IF_ERROR(parse_list(obj, "links", p.links,
                                     [&](JsonObject o) { return parse_link(std::move(o), src); }));
  ALPASIM_RETURN_IF_ERROR(parse_list(obj, "attention", p.attention, [&](JsonObject o) {
    return parse_attention(std::move(o), src);
  }));
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  // A profile is a set of measurements: without one it calibrates nothing, and a scenario
  // naming it would silently run on the defaults.
  if (p.gemm.empty() && p.conv.empty() && p.collectives.empty() && p.links.empty() &&
      p.attention.empty()) {
    return root.error("expected at least one entry in \"gemm\", \"conv\", \"collectives\", "
                      "\"links\" or \"attention\", got none: a profile without measurements calibrates "
                      "nothing");
  }
  return p;
}

Result<Profile> read_profile_file(const std::filesystem::path& path) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::read_json_file(path));
  return parse_profile(JsonValue::root(doc));
}

core::Json profile_to_json(const Profile& p) {
  core::Json j;
  j["schema_version"] = p.schema_version;
  const auto& v = p.provenance;
  j["provenance"] = {{"machine", v.machine},
                     {"gpu", v.gpu},
                     {"driver_version", v.driver_version},
                     {"cuda_version", v.cuda_version},
                     {"cublas_version", v.cublas_version},
                     {"cudnn_version", v.cudnn_version},
                     {"nccl_version", v.nccl_version},
                     {"date", v.date},
                     {"measured_by", v.measured_by},
                     {"source", profile_source_name(v.source)},
                     {"citation", v.citation}};
  core::Json gemm = core::Json::array();
  for (const auto& e : p.gemm) {
    gemm.push_back(meta_json({{"m", e.m},
                              {"n", e.n},
                              {"k", e.k},
                              {"batch", e.batch},
                              {"dtype", std::string(core::dtype_name(e.dtype))},
                              {"time_us", e.time_us}},
                             e.meta));
  }
  j["gemm"] = gemm;
  core::Json conv = core::Json::array();
  for (const auto& e : p.conv) {
    conv.push_back(meta_json({{"batch", e.batch},
                              {"in_channels", e.in_channels},
                              {"out_channels", e.out_channels},
                              {"height", e.height},
                              {"width", e.width},
                              {"kernel_h", e.kernel_h},
                              {"kernel_w", e.kernel_w},
                              {"stride", e.stride},
                              {"padding", e.padding},
                              {"dtype", std::string(core::dtype_name(e.dtype))},
                              {"time_us", e.time_us}},
                             e.meta));
  }
  j["conv"] = conv;
  core::Json coll = core::Json::array();
  for (const auto& e : p.collectives) {
    core::Json c = {{"collective", e.collective}, {"algorithm", e.algorithm},
                    {"protocol", e.protocol},     {"channels", e.channels},
                    {"num_gpus", e.num_gpus},     {"num_nodes", e.num_nodes},
                    {"message_bytes", e.message_bytes}};
    if (e.time_us) c["time_us"] = *e.time_us;
    if (e.busbw_gbyte_per_s) c["busbw_gbyte_per_s"] = *e.busbw_gbyte_per_s;
    coll.push_back(meta_json(c, e.meta));
  }
  j["collectives"] = coll;
  core::Json links = core::Json::array();
  for (const auto& e : p.links) {
    links.push_back(meta_json({{"link_class", e.link_class},
                               {"measurement", e.measurement},
                               {"spec_gbyte_per_s", e.spec_gbyte_per_s},
                               {"achieved_gbyte_per_s", e.achieved_gbyte_per_s}},
                              e.meta));
  }
  j["links"] = links;
  // Written only when present, so the profiles before the section serialise as they did.
  if (!p.attention.empty()) {
    core::Json attention = core::Json::array();
    for (const auto& e : p.attention) {
      attention.push_back(meta_json({{"batch", e.batch},
                                     {"heads", e.heads},
                                     {"kv_heads", e.kv_heads},
                                     {"seq", e.seq},
                                     {"head_dim", e.head_dim},
                                     {"v_head_dim", e.v_head_dim},
                                     {"causal", e.causal},
                                     {"dtype", std::string(core::dtype_name(e.dtype))},
                                     {"kernel", e.kernel},
                                     {"forward_us", e.forward_us},
                                     {"backward_us", e.backward_us}},
                                    e.meta));
    }
    j["attention"] = attention;
  }
  return j;
}

}  // namespace alpasim::schema
