#include "rankd/model/identity.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/common/golden.h"

namespace rankd::model {
namespace {

namespace fs = std::filesystem;

class IdentityTest : public ::testing::Test {
 protected:
  IdentityTest() : dir_(absl::StrCat(::testing::TempDir(), "/rankd_identity_", getpid())) {
    fs::remove_all(dir_);
    fs::copy(testing::ModelDir("llama-cls"), dir_);
  }
  ~IdentityTest() override { fs::remove_all(dir_); }
  std::string Identity() const {
    absl::StatusOr<std::string> id = ModelIdentity(dir_);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }
  // Flips one byte of `file` at `offset` from its end.
  void Flip(const std::string& file, size_t from_end) const {
    const std::string path = dir_ + "/" + file;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-static_cast<std::streamoff>(from_end), std::ios::end);
    const char c = static_cast<char>(f.get() ^ 1);
    f.seekp(-static_cast<std::streamoff>(from_end), std::ios::end);
    f.put(c);
  }
  const std::string dir_;
};

TEST_F(IdentityTest, TheSameFilesAreTheSameModelAndAnyChangeToWhatScoresIsAnother) {
  const std::string original = Identity();
  EXPECT_EQ(original, *ModelIdentity(testing::ModelDir("llama-cls")));  // a copy: the same
  ASSERT_EQ(original.size(), 7u + 16u);
  EXPECT_EQ(original.substr(0, 7), "sha256:");
  // The last weight byte (a sample ends there), the config, a rankd.yaml added, the tokenizer.
  Flip("model.safetensors", 1);
  const std::string weights = Identity();
  EXPECT_NE(weights, original);
  Flip("model.safetensors", 1);
  EXPECT_EQ(Identity(), original);
  std::ofstream(dir_ + "/config.json", std::ios::app) << "\n";
  const std::string config = Identity();
  EXPECT_NE(config, original);
  std::ofstream(dir_ + "/rankd.yaml") << "head: classifier:0\n";
  EXPECT_NE(Identity(), config);
  fs::remove(dir_ + "/rankd.yaml");
  EXPECT_EQ(Identity(), config);
  Flip("tokenizer.model", 10);
  EXPECT_NE(Identity(), config);
  fs::remove(dir_ + "/model.safetensors");
  EXPECT_FALSE(ModelIdentity(dir_).ok());
}

}  // namespace
}  // namespace rankd::model
