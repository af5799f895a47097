// FieldError: an error about one field of a request, carried as data beside its message (an
// absl::Status payload), so that code that learns where the field really is (a work item's item
// 2 is the caller's item 7) renames it without reading the message, and each edge renders it in
// its own words. The message stays what it always was: "items[3].text: 513 tokens exceeds
// max_item_tokens=512", "query_ids[2]: 70000 is outside [0, vocab_size=32000)".
#ifndef RANKD_COMMON_FIELD_ERROR_H_
#define RANKD_COMMON_FIELD_ERROR_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rankd {

struct FieldError {
  // The item the field belongs to: its index in the list of items the error was found in (a
  // request's, a work item's, an engine call's); -1: a field of the request, not of an item.
  int item = -1;
  // The field's path: under the item (".text", ".ids[7]", " token 3"; "" for the item itself),
  // or of the request ("query", "query_ids[2]", "items").
  std::string field;
  // The limit the field is over, as the config names it ("max_item_tokens"); "" when the error
  // is not about a limit.
  std::string limit;
  // What is wrong ("513 tokens exceeds max_item_tokens=512").
  std::string what;

  // The path as messages write it, with `list` for the items: "items[3].text", "query".
  std::string Path(absl::string_view list = "items") const;
  // Path(list) + ": " + what: the status message.
  std::string Message(absl::string_view list = "items") const;
  bool operator==(const FieldError&) const = default;
};

// A status of `code` whose message is error.Message(list), with `error` attached. `list` names the
// request's items in the message: a ScoreRequest's "items", a TokenizeRequest's "texts" (AtItem
// and MapItem render an item's message again with "items": they are for Score's errors).
absl::Status FieldErrorStatus(absl::StatusCode code, FieldError error,
                              absl::string_view list = "items");
// INVALID_ARGUMENT about `field` of the request, and about `field` under item `item` (the usual
// FieldErrorStatus calls).
absl::Status InvalidField(std::string field, std::string what, std::string limit = "");
absl::Status InvalidItemField(int item, std::string field, std::string what,
                              std::string limit = "");
// The FieldError attached to `status`, if any.
std::optional<FieldError> GetFieldError(const absl::Status& status);

// `status`, a FieldError status about a field of one item with the path relative to the item
// (a check called with field ".ids" for the item's ids), made about item `item` of the list.
// Other statuses (OK, no FieldError, one already about an item) as they are.
absl::Status AtItem(int item, absl::Status status);
// A FieldError status about an item, about item map(item) instead (the message rendered again);
// other statuses as they are.
absl::Status MapItem(const absl::Status& status, const std::function<int(int)>& map);

// The FieldError as bytes and back (the worker protocol carries it in gRPC's error details).
std::string EncodeFieldError(const FieldError& error);
std::optional<FieldError> DecodeFieldError(absl::string_view bytes);

}  // namespace rankd

#endif  // RANKD_COMMON_FIELD_ERROR_H_
