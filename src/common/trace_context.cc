#include "rankd/common/trace_context.h"

namespace rankd {
namespace {

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(absl::string_view s) { return s.find_first_not_of('0') == absl::string_view::npos; }

}  // namespace

std::optional<std::string> TraceIdOf(absl::string_view v) {
  // 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters for the four fields.
  constexpr size_t kLength = 55;
  if (v.size() < kLength || v[2] != '-' || v[35] != '-' || v[52] != '-') return std::nullopt;
  const absl::string_view version = v.substr(0, 2), trace_id = v.substr(3, 32),
                          parent_id = v.substr(36, 16), flags = v.substr(53, 2);
  if (!IsLowerHex(version) || !IsLowerHex(trace_id) || !IsLowerHex(parent_id) ||
      !IsLowerHex(flags) || version == "ff" || AllZero(trace_id) || AllZero(parent_id)) {
    return std::nullopt;
  }
  if (v.size() > kLength && (version == "00" || v[kLength] != '-')) return std::nullopt;
  return std::string(trace_id);
}

}  // namespace rankd
