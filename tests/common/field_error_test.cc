#include "rankd/common/field_error.h"

#include <gtest/gtest.h>

#include <string>

namespace rankd {
namespace {

TEST(FieldErrorTest, TheMessageIsRenderedFromTheData) {
  const absl::Status s = InvalidItemField(3, ".text", "513 tokens exceeds max_item_tokens=512",
                                          "max_item_tokens");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "items[3].text: 513 tokens exceeds max_item_tokens=512");
  const std::optional<FieldError> e = GetFieldError(s);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->item, 3);
  EXPECT_EQ(e->field, ".text");
  EXPECT_EQ(e->limit, "max_item_tokens");
  EXPECT_EQ(e->Path("documents"), "documents[3].text");
  EXPECT_EQ(InvalidField("query", "empty").message(),
            "query: empty");
  EXPECT_FALSE(GetFieldError(absl::InvalidArgumentError("items[1].text: 200 tokens")).has_value());
}

TEST(FieldErrorTest, AtItemMakesAFieldErrorAboutAnItem) {
  const absl::Status ids = InvalidField(".ids[7]", "5000 is outside");
  const absl::Status at = AtItem(2, ids);
  EXPECT_EQ(at.message(), "items[2].ids[7]: 5000 is outside");
  EXPECT_EQ(GetFieldError(at)->item, 2);
  EXPECT_EQ(AtItem(5, at).message(), "items[2].ids[7]: 5000 is outside");  // already an item's
  const absl::Status plain = absl::InvalidArgumentError("no field");
  EXPECT_EQ(AtItem(2, plain), plain);
  EXPECT_TRUE(AtItem(2, absl::OkStatus()).ok());
}

TEST(FieldErrorTest, MapItemRenamesTheItemOnly) {
  const absl::Status s = InvalidItemField(1, ".text", "200 tokens");
  const absl::Status mapped = MapItem(s, [](int i) { return i + 9; });
  EXPECT_EQ(mapped.message(), "items[10].text: 200 tokens");
  EXPECT_EQ(mapped.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GetFieldError(mapped)->item, 10);
  // Errors about the request's own fields, and errors without a FieldError, stay as they are:
  // nothing reads a message.
  const absl::Status items = InvalidField("items", "5000 tokens");
  EXPECT_EQ(MapItem(items, [](int i) { return i + 9; }).message(), "items: 5000 tokens");
  const absl::Status text = absl::InvalidArgumentError("items[1].text: 200 tokens");
  EXPECT_EQ(MapItem(text, [](int i) { return i + 9; }).message(), "items[1].text: 200 tokens");
}

TEST(FieldErrorTest, EncodingRoundTripsAndRefusesOtherBytes) {
  FieldError e;
  e.item = 4;
  e.field = " token 2";
  e.what = std::string("a\0b: c", 6);
  EXPECT_EQ(DecodeFieldError(EncodeFieldError(e)), e);
  EXPECT_FALSE(DecodeFieldError("").has_value());
  EXPECT_FALSE(DecodeFieldError("items[1]: x").has_value());
  std::string bad = EncodeFieldError(e);
  bad[bad.find('\0') + 1] = 'x';  // the item is no number
  EXPECT_FALSE(DecodeFieldError(bad).has_value());
}

}  // namespace
}  // namespace rankd
