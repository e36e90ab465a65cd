#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/json_reader.h"
#include "core/status.h"

namespace alpasim::schema {

/// The version of the profile format this code reads and writes (docs/profiles.md).
inline constexpr std::int64_t kProfileSchemaVersion = 1;

/// Where a number came from: measured on the machine, or derived from published figures.
enum class ProfileSource { kMeasured, kDerived };
/// What calibration does with an entry: fit parameters to it, or only check predictions.
enum class ProfileRole { kFit, kCheck };

/// "measured" / "derived".
const char* profile_source_name(ProfileSource s);
/// "fit" / "check".
const char* profile_role_name(ProfileRole r);

/// Who, what and when: the machine and software a profile describes.
struct ProfileProvenance {
  std::string machine;         ///< cluster preset or machine id, e.g. "dgx-a100-80gb"
  std::string gpu;             ///< GPU kind (cluster/gpu_spec.h spelling), e.g. "a100-80gb"
  std::string driver_version;  ///< e.g. "535.104.05"; "unknown" when the source does not say
  std::string cuda_version;
  std::string cublas_version;
  std::string cudnn_version;
  std::string nccl_version;
  std::string date;            ///< ISO date of the measurement or of the derivation
  std::string measured_by;     ///< person, tool or script
  ProfileSource source = ProfileSource::kDerived;
  std::string citation;        ///< where derived figures come from (required when derived)
};

/// Fields every table entry carries.
struct ProfileEntryMeta {
  ProfileRole role = ProfileRole::kFit;
  ProfileSource source = ProfileSource::kDerived;
  std::string citation;  ///< the source row / command; never empty
};

/// One GEMM measurement: C[batch, m, n] = A[batch, m, k] · B[batch, k, n].
struct GemmEntry {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  core::DType dtype = core::DType::kFp16;
  /// Exactly one of time_us / tflops_per_s is given in the file; the loader fills the other.
  double time_us = 0;
  double tflops_per_s = 0;
  ProfileEntryMeta meta;
};

/// One 2-D convolution measurement (NCHW, "same"-style padding given explicitly).
struct ConvEntry {
  std::int64_t batch = 0, in_channels = 0, out_channels = 0, height = 0, width = 0;
  std::int64_t kernel_h = 0, kernel_w = 0, stride = 1, padding = 0;
  core::DType dtype = core::DType::kFp16;
  double time_us = 0;
  ProfileEntryMeta meta;
};

/// One collective measurement (nccl-tests conventions: message_bytes is the total size S;
/// busbw = algbw · factor, README of validation/data).
struct CollectiveEntry {
  std::string collective;  ///< all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv
  std::string algorithm = "default";  ///< "default" (NCCL's choice), "ring", "tree", "nvls"
  std::string protocol = "default";   ///< "default", "ll", "ll128", "simple"
  std::int64_t channels = 0;  ///< NCCL_MAX_NCHANNELS when forced; 0 = NCCL's choice
  std::int64_t num_gpus = 0;
  std::int64_t num_nodes = 0;
  std::int64_t message_bytes = 0;  ///< 0 = "large message" asymptote (source gives no size)
  std::optional<double> time_us;
  std::optional<double> busbw_gbyte_per_s;
  ProfileEntryMeta meta;
};

/// A point-to-point or per-NIC bandwidth measurement of one link class.
struct LinkEntry {
  std::string link_class;  ///< "nvlink", "nvswitch", "pcie", "infiniband", "ethernet", "efa"
  /// "p2p": a copy between two endpoints (p2pBandwidthLatencyTest, nvbandwidth);
  /// "collective": bus bandwidth per link or NIC of a large NCCL collective.
  std::string measurement;
  double spec_gbyte_per_s = 0;      ///< line rate per direction, from the datasheet
  double achieved_gbyte_per_s = 0;  ///< achieved per direction (p2p copy or per-NIC busbw)
  ProfileEntryMeta meta;
};

/// One fused (flash) attention kernel measurement: forward and backward of softmax(Q K^T /
/// sqrt(d)) V over `batch` x `heads` query heads (sharing `kv_heads` key/value heads), `seq`
/// queries and keys, query/key head dimension `head_dim` and value head dimension
/// `v_head_dim` (MLA: 192 and 128), as one kernel library runs it (e.g. cuDNN's through
/// PyTorch SDPA). Times are per call on one GPU; backward excludes the forward.
struct AttentionEntry {
  std::int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, head_dim = 0, v_head_dim = 0;
  bool causal = true;  ///< causal mask: the kernel skips key tiles above the diagonal
  core::DType dtype = core::DType::kBf16;
  std::string kernel;  ///< the library and backend measured, e.g. "cudnn 9.19 (torch sdpa)"
  double forward_us = 0;
  double backward_us = 0;
  ProfileEntryMeta meta;
};

/// A microbenchmark profile of one machine kind (profiles/<machine>/<date>-<what>.json).
struct Profile {
  std::int64_t schema_version = kProfileSchemaVersion;
  ProfileProvenance provenance;
  std::vector<GemmEntry> gemm;
  std::vector<ConvEntry> conv;
  std::vector<CollectiveEntry> collectives;
  std::vector<LinkEntry> links;
  std::vector<AttentionEntry> attention;
};

/// Reads a profile strictly: unknown keys, missing citations, numbers out of range and a
/// wrong schema_version are errors naming the file and JSON pointer, e.g.
/// `p.json: /gemm/3/citation: missing required key (expected a non-empty string)`.
core::Result<Profile> parse_profile(const core::JsonValue& root);
/// read_json_file + parse_profile.
core::Result<Profile> read_profile_file(const std::filesystem::path& path);
/// The JSON parse_profile reads back to an equal profile (keys sorted, so byte-stable).
core::Json profile_to_json(const Profile& profile);

}  // namespace alpasim::schema
