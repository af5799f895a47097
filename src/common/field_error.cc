#include "rankd/common/field_error.h"

#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rankd {
namespace {

constexpr absl::string_view kPayloadUrl = "type.rankd/rankd.FieldError";
// The encoding's first part: its name and version; then item, field, limit, what, NUL-separated
// (`what`, last, may hold anything).
constexpr absl::string_view kEncodingTag = "rankd.FieldError/1";

}  // namespace

std::string FieldError::Path(absl::string_view list) const {
  if (item < 0) return field;
  return absl::StrCat(list, "[", item, "]", field);
}

std::string FieldError::Message(absl::string_view list) const {
  return absl::StrCat(Path(list), ": ", what);
}

absl::Status FieldErrorStatus(absl::StatusCode code, FieldError error, absl::string_view list) {
  absl::Status status(code, error.Message(list));
  status.SetPayload(kPayloadUrl, absl::Cord(EncodeFieldError(error)));
  return status;
}

absl::Status InvalidField(std::string field, std::string what, std::string limit) {
  return InvalidItemField(-1, std::move(field), std::move(what), std::move(limit));
}

absl::Status InvalidItemField(int item, std::string field, std::string what, std::string limit) {
  FieldError error;
  error.item = item;
  error.field = std::move(field);
  error.limit = std::move(limit);
  error.what = std::move(what);
  return FieldErrorStatus(absl::StatusCode::kInvalidArgument, std::move(error));
}

std::optional<FieldError> GetFieldError(const absl::Status& status) {
  const auto payload = status.GetPayload(kPayloadUrl);  // absl::optional<absl::Cord>
  if (!payload) return std::nullopt;
  return DecodeFieldError(std::string(*payload));
}

absl::Status AtItem(int item, absl::Status status) {
  std::optional<FieldError> error = GetFieldError(status);
  if (!error || error->item >= 0) return status;
  error->item = item;
  return FieldErrorStatus(status.code(), *std::move(error));
}

absl::Status MapItem(const absl::Status& status, const std::function<int(int)>& map) {
  std::optional<FieldError> error = GetFieldError(status);
  if (!error || error->item < 0) return status;
  error->item = map(error->item);
  return FieldErrorStatus(status.code(), *std::move(error));
}

std::string EncodeFieldError(const FieldError& error) {
  const absl::string_view nul("\0", 1);
  return absl::StrCat(kEncodingTag, nul, error.item, nul, error.field, nul, error.limit, nul,
                      error.what);
}

std::optional<FieldError> DecodeFieldError(absl::string_view bytes) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(bytes, absl::MaxSplits(absl::string_view("\0", 1), 4));
  FieldError error;
  if (parts.size() != 5 || parts[0] != kEncodingTag || !absl::SimpleAtoi(parts[1], &error.item)) {
    return std::nullopt;
  }
  error.field = std::string(parts[2]);
  error.limit = std::string(parts[3]);
  error.what = std::string(parts[4]);
  return error;
}

}  // namespace rankd
