// The full-size tokenizer.json files that real checkpoints ship (tests/data/tokenizers/<name>:
// tokenizer.json.xz, tokenizer_config.json) against transformers 5.17 AutoTokenizer's ids on hard
// strings (reference.json), with and without special tokens. tokenizer.json is decompressed with
// liblzma into a temporary directory first.
#include <gtest/gtest.h>
#include <lzma.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "rankd/tokenizer/tokenizer.h"
#include "tests/common/golden.h"

namespace rankd::tokenizer {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

// tests/data/tokenizers, beside the models directory that ModelDir uses.
fs::path DataDir() {
  return fs::path(testing::ModelDir("")).parent_path().parent_path() / "tokenizers";
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The decompressed contents of an .xz file ("" with a test failure when it is not one).
std::string Unxz(const fs::path& path) {
  const std::string in = ReadFile(path);
  lzma_stream strm = LZMA_STREAM_INIT;
  EXPECT_EQ(lzma_stream_decoder(&strm, UINT64_MAX, 0), LZMA_OK);
  std::string out;
  std::vector<uint8_t> buf(1 << 20);
  strm.next_in = reinterpret_cast<const uint8_t*>(in.data());
  strm.avail_in = in.size();
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    strm.next_out = buf.data();
    strm.avail_out = buf.size();
    ret = lzma_code(&strm, LZMA_FINISH);
    out.append(reinterpret_cast<const char*>(buf.data()), buf.size() - strm.avail_out);
  }
  lzma_end(&strm);
  EXPECT_EQ(ret, LZMA_STREAM_END) << path;
  return ret == LZMA_STREAM_END ? out : std::string();
}

// A model directory with the tokenizer files of `name`, tokenizer.json decompressed.
std::string Unpack(const std::string& name) {
  const fs::path src = DataDir() / name;
  const fs::path dir = fs::path(::testing::TempDir()) / ("real_tokenizer_" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << Unxz(src / "tokenizer.json.xz");
  fs::copy_file(src / "tokenizer_config.json", dir / "tokenizer_config.json",
                fs::copy_options::overwrite_existing);
  return dir.string();
}

class RealTokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTokenizerTest, IdsMatchAutoTokenizer) {
  auto tok = LoadTokenizer(Unpack(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Json ref = Json::parse(ReadFile(DataDir() / GetParam() / "reference.json"));
  ASSERT_EQ(ref.at("tokenizer"), GetParam());
  const Json& cases = ref.at("cases");
  ASSERT_GT(cases.size(), 80u);
  for (const Json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    auto plain = (*tok)->Encode(text, false);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(*plain, c.at("ids").get<Ids>()) << "text: " << text;
    auto special = (*tok)->Encode(text, true);
    ASSERT_TRUE(special.ok()) << special.status();
    EXPECT_EQ(*special, c.at("ids_special").get<Ids>()) << "text: " << text;
    // EncodeBounded cuts at word boundaries: its ids start the whole encoding.
    const Ids& all = *plain;
    for (int64_t max_tokens : {1, 3, 10}) {
      auto bounded = (*tok)->EncodeBounded(text, max_tokens);
      ASSERT_TRUE(bounded.ok()) << bounded.status();
      if (static_cast<int64_t>(all.size()) <= max_tokens) {
        EXPECT_EQ(*bounded, all) << "text: " << text;
      } else {
        ASSERT_GT(static_cast<int64_t>(bounded->size()), max_tokens) << "text: " << text;
        ASSERT_LE(bounded->size(), all.size()) << "text: " << text;
        EXPECT_EQ(*bounded, Ids(all.begin(), all.begin() + bounded->size())) << "text: " << text;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, RealTokenizerTest,
                         ::testing::Values("llama2", "gemma", "gemma3", "qwen3", "llama3",
                                           "mistral_nemo"));

}  // namespace
}  // namespace rankd::tokenizer
