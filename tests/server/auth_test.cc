#include "rankd/server/auth.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rankd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kGood[] = "good-key-0123456789";

TEST(BearerKeyTest, FollowsRfc6750) {
  for (const char* ok : {"Bearer k", "bearer k", "BEARER k", "Bearer   k", "Bearer a-Z.0_~+/=="}) {
    SCOPED_TRACE(ok);
    EXPECT_TRUE(BearerKey(ok).ok());
  }
  EXPECT_EQ(*BearerKey("bearer   abc="), "abc=");
  // "Bearer ==": padding alone is no token.
  for (const char* bad :
       {"", "Bearer", "Bearer ", "Bearer ==", "Bearerk", "Basic k", "Bearer\tk", "Bearer k ",
        "Bearer k\t", "Bearer a b", "Bearer k=x", "Bearer k,", " Bearer k", "Bearer k#c"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(BearerKey(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

class ApiKeysTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/rankd_keys_", getpid(), "_", files_++);
    std::ofstream(path, std::ios::binary) << text;
    paths_.push_back(path);
    return path;
  }
  ~ApiKeysTest() override {
    for (const std::string& p : paths_) std::filesystem::remove(p);
  }
  std::string LoadError(const std::string& text) {
    absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(Write(text));
    return keys.ok() ? "ok" : std::string(keys.status().message());
  }

 private:
  int files_ = 0;
  std::vector<std::string> paths_;
};

TEST_F(ApiKeysTest, TheFileFormat) {
  // Comments and blank lines, blanks around keys, CRLF, and a byte-order mark are fine.
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys =
      ApiKeys::Load(Write(absl::StrCat("\xEF\xBB\xBF", kGood, "\r\n# a comment\r\n\r\n   ",
                                       "second-key-abcdefgh", "  \n\t# indented comment\n")));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 2u);
  const std::string bearer = absl::StrCat("Bearer ", kGood);
  EXPECT_TRUE((*keys)->Check({bearer}).ok());  // the first key, behind the mark
  EXPECT_TRUE((*keys)->Check({"Bearer second-key-abcdefgh"}).ok());

  // Odd lines refuse the file, naming the line, never quoting it.
  std::string e = LoadError(absl::StrCat("# keys\n", kGood, " # the ops team\n"));
  EXPECT_THAT(e, HasSubstr("line 2 is not a key"));
  EXPECT_THAT(e, Not(HasSubstr(kGood)));
  EXPECT_THAT(LoadError("# keys\n\nshort-key\n"),
              HasSubstr("line 3: a key of 9 characters; keys need at least 16"));
  EXPECT_THAT(LoadError("k\n"), HasSubstr("line 1: a key of 1 characters"));
  EXPECT_THAT(LoadError(absl::StrCat(kGood, "\nkey with spaces in it\n")),
              HasSubstr("line 2 is not a key"));
  EXPECT_THAT(LoadError("\xEF\xBB\xBF\n\xEF\xBB\xBFgood-key-0123456789\n"),
              HasSubstr("line 2 is not a key"));  // a mark is skipped at the start only
  EXPECT_THAT(LoadError("# nothing\n\n"), HasSubstr("holds no key"));
  EXPECT_THAT(LoadError(absl::StrCat(kGood, "\nkey\xC3\xA9-with-a-non-ascii\n")),
              HasSubstr("line 2 is not a key"));
}

TEST_F(ApiKeysTest, CheckTakesExactlyOneWellFormedValue) {
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(Write(absl::StrCat(kGood, "\n")));
  ASSERT_TRUE(keys.ok()) << keys.status();
  const ApiKeys& k = **keys;
  const std::string good = absl::StrCat("Bearer ", kGood);
  const std::string lower = absl::StrCat("bearer ", kGood);
  EXPECT_TRUE(k.Check({good}).ok());
  EXPECT_TRUE(k.Check({lower}).ok());
  auto message = [&](std::vector<absl::string_view> values) {
    const absl::Status s = k.Check(values);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
    return std::string(s.message());
  };
  EXPECT_THAT(message({}), HasSubstr("no API key: send one 'authorization: Bearer KEY'"));
  EXPECT_THAT(message({good, "Bearer wrong-wrong-wrong"}), HasSubstr("2 authorization values"));
  EXPECT_THAT(message({"Bearer wrong-wrong-wrong", good}), HasSubstr("2 authorization values"));
  EXPECT_THAT(message({good, good}), HasSubstr("2 authorization values"));
  EXPECT_THAT(message({good + " "}), HasSubstr("malformed authorization"));
  EXPECT_THAT(message({absl::StrCat("Basic ", kGood)}),
              HasSubstr("malformed authorization (the scheme is not Bearer)"));
  EXPECT_EQ(message({"Bearer wrong-wrong-wrong"}), "API key not accepted");
  EXPECT_THAT(message({good + " "}), Not(HasSubstr(kGood)));
}

}  // namespace
}  // namespace rankd::server
