// libFuzzer target: the profile parser (schema::parse_profile), the input of
// `alpa-sim calibrate` and of a scenario's "profile": {"file": ...}.
#include "core/json_reader.h"
#include "fuzz/fuzz_common.h"
#include "schema/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace alpasim;
  auto doc = core::parse_json_text(fuzz::text_of(data, size), "profile.json");
  fuzz::check_error(doc.status());
  if (!doc.ok()) return 0;
  fuzz::check_error(schema::parse_profile(core::JsonValue::root(*doc)).status());
  return 0;
}
