// libFuzzer target: alpa-sim's scenario parser (driver::parse_scenario), the input of
// `alpa-sim SCENARIO.json`. Relative paths resolve against a folder that does not exist.
#include "driver/scenario.h"
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace alpasim;
  auto s = driver::parse_scenario(fuzz::text_of(data, size), "fuzz.json", "/nonexistent-fuzz-dir");
  fuzz::check_error(s.status());
  return 0;
}
