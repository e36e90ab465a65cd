#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "exec/backend.h"
#include "exec/launch/poll.h"
#include "exec/launch/rank_env.h"

namespace alpasim::exec::launch {

/// "<rendezvous_dir>/<run_id>.<name>": where a rank publishes `name` for the others.
std::string rendezvous_path(const RankEnv& env, const std::string& name);

/// Writes `bytes` to `path` atomically (a temporary file renamed over it), so a reader never
/// sees a partial file. kUnavailable naming the path and errno text when it cannot.
core::Status publish_file(const std::string& path, const std::string& bytes);

/// Waits (polling every `interval_s` on `clock`) until `path` exists, then returns its bytes.
/// kUnavailable "<path>: timed out after <t> s (did rank 0 start? is the folder shared?)".
core::Result<std::string> wait_for_file(const std::string& path, double timeout_s, double interval_s, Clock& clock);

/// Length-prefixed concatenation of opaque blobs (NCCL unique ids: 128 bytes each):
/// "alpasim-blobs 1 <count>\n" then, per blob, "<size>\n<bytes>".
std::string encode_blobs(const std::vector<std::string>& blobs);
/// Inverse of encode_blobs; kInvalidArgument "<what>: expected ..., got ..." on a bad header,
/// a truncated blob or a count other than `expected_count` (>= 0; -1 accepts any).
core::Result<std::vector<std::string>> decode_blobs(const std::string& bytes, std::int64_t expected_count,
                                                    const std::string& what);

/// A block of a parameter or gradient of a stage with per-operator shardings
/// (Buffer::global_shape non-empty): each device holds only its block, so the whole tensor
/// is assembled from every device's blocks (as the CPU backend's result).
struct TensorBlock {
  bool gradient = false;  ///< a gradient (named by its parameter) or a parameter
  std::string name;
  std::vector<std::int64_t> global_shape;
  std::vector<std::int64_t> offset;  ///< where the block starts, per axis
  std::vector<std::int64_t> shape;
  std::vector<float> data;  ///< row-major, product of `shape` elements
};

/// Writes `block` into its whole tensor in `gradients` or `parameters` (created zero-filled
/// at the global size). kInvalidArgument "tensor block <name>: expected ..., got ..." when
/// the block's data size, rank or extent does not fit, or the tensor exists with another size.
core::Status place_block(const TensorBlock& block, std::map<std::string, std::vector<float>>* gradients,
                         std::map<std::string, std::vector<float>>* parameters);

/// What one rank reports to rank 0 (or to the launcher) after its run.
struct RankResult {
  std::int32_t rank = 0;
  std::string error;  ///< empty: success; else the rank's Status text (names rank and instruction)
  std::map<std::int64_t, double> losses;  ///< loss buffer id -> first element (first iteration)
  std::vector<double> iteration_s;        ///< measured iterations, seconds
  std::vector<InstrTiming> timings;       ///< `device` = rank; ns from the rank's iteration start
  std::map<std::string, std::vector<float>> gradients;   ///< those this rank owns
  std::map<std::string, std::vector<float>> parameters;  ///< those this rank owns
  std::vector<TensorBlock> blocks;  ///< this rank's blocks of sharded parameters and gradients
};

/// Text form of a RankResult (numbers as C99 hex floats: exact round trip).
std::string encode_rank_result(const RankResult& r);
/// Inverse of encode_rank_result; kInvalidArgument "<what>: line N: expected ..., got ...".
core::Result<RankResult> decode_rank_result(const std::string& text, const std::string& what);

/// One ExecutionResult from every rank's result (backend "cuda"): the loss is the mean over
/// all ranks' loss buffers (as the virtual-device mode), gradients and parameters the union
/// (a name reported twice: kInternal), timings concatenated in rank order, iteration i's time
/// the slowest rank's; tensor blocks placed in rank order into their whole tensors (a name
/// also reported whole: kInternal). The first rank with an error makes the whole merge that error
/// ("rank R: <error>"). kInvalidArgument when ranks are missing or repeated.
core::Result<ExecutionResult> merge_rank_results(const std::vector<RankResult>& ranks, std::int32_t world_size);

}  // namespace alpasim::exec::launch
