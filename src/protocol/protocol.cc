#include "rankd/protocol/protocol.h"

#include <algorithm>
#include <climits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace rankd::protocol {

std::string MapItemIndex(absl::string_view message, const std::function<int(int)>& map) {
  absl::string_view rest = message;
  if (!absl::ConsumePrefix(&rest, "items[")) return std::string(message);
  const size_t close = rest.find(']');
  int index = 0;
  if (close == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, close), &index)) {
    return std::string(message);
  }
  return absl::StrCat("items[", map(index), rest.substr(close));
}

std::string ShiftItemIndex(absl::string_view message, int offset) {
  if (offset == 0) return std::string(message);
  return MapItemIndex(message, [offset](int i) { return i + offset; });
}

int TransportMessageLimit(int64_t max_message_bytes) {
  return static_cast<int>(std::min<int64_t>(INT_MAX, 2 * max_message_bytes + (1 << 20)));
}

bool TruncatesAtEnd(const rankd::v1::ScoreRequest& request, const Limits& limits) {
  return request.truncate() == rankd::v1::TRUNCATE_END || limits.truncate == Limits::Truncate::kEnd;
}

}  // namespace rankd::protocol
