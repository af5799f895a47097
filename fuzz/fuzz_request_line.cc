// Fuzz target: one request line of `rankd score` / `rankd-client score` (the shorthand JSON or
// proto3 JSON). A request or an error naming the field; never a crash.
#include <cstddef>
#include <cstdint>

#include "rankd/cli/request_line.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)rankd::cli::ParseRequestLine(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
