// libFuzzer target: the Hugging Face config.json importer (ir::parse_hf_config), as a
// scenario's "model": {"hf_config": ...} reads it.
#include "core/json_reader.h"
#include "fuzz/fuzz_common.h"
#include "ir/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace alpasim;
  auto doc = core::parse_json_text(fuzz::text_of(data, size), "config.json");
  fuzz::check_error(doc.status());
  if (!doc.ok()) return 0;
  auto config = ir::parse_hf_config(core::JsonValue::root(*doc));
  fuzz::check_error(config.status());
  return 0;
}
