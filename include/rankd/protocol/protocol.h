// What the front end (rankd_server) and the workers (rankd_worker) must agree on beyond
// rankd/internal/worker.proto. Header-only: rankd_server does not link rankd_worker.
#ifndef RANKD_PROTOCOL_PROTOCOL_H_
#define RANKD_PROTOCOL_PROTOCOL_H_

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "rankd/server/config.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::worker {

// An error message that names an item by its index in some list of items ("items[3].text: ...")
// with that index replaced by `map(index)`: for a list that holds some of the caller's items,
// errors name items by their index in the caller's request. Other messages as they are.
inline std::string MapItemIndex(absl::string_view message, const std::function<int(int)>& map) {
  absl::string_view rest = message;
  if (!absl::ConsumePrefix(&rest, "items[")) return std::string(message);
  const size_t close = rest.find(']');
  int index = 0;
  if (close == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, close), &index)) {
    return std::string(message);
  }
  return absl::StrCat("items[", map(index), rest.substr(close));
}

// MapItemIndex for a list that starts at item `offset` of the caller's request.
inline std::string ShiftItemIndex(absl::string_view message, int offset) {
  if (offset == 0) return std::string(message);
  return MapItemIndex(message, [offset](int i) { return i + offset; });
}

// The largest message rankd's gRPC servers accept, the front end's (limits.max_message_bytes) and
// the workers' (--max-message-bytes, the same value): well above the limit, so that a request
// somewhat over it is answered INVALID_ARGUMENT naming the limit (gRPC itself answers
// RESOURCE_EXHAUSTED above this), and so that a valid request wrapped in a work item fits.
inline int TransportMessageLimit(int64_t max_message_bytes) {
  return static_cast<int>(std::min<int64_t>(INT_MAX, 2 * max_message_bytes + (1 << 20)));
}

// Whether `request` is cut to its limits (TRUNCATE_END) or refused when over them: TRUNCATE_END
// when it asks for it or limits.truncate is end. The front end's validation and result cache key
// and the worker's cut all read the mode here.
inline bool TruncatesAtEnd(const rankd::v1::ScoreRequest& request, const server::Limits& limits) {
  return request.truncate() == rankd::v1::TRUNCATE_END ||
         limits.truncate == server::Limits::Truncate::kEnd;
}

}  // namespace rankd::worker

#endif  // RANKD_PROTOCOL_PROTOCOL_H_
