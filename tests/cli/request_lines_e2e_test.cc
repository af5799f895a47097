// One request file, both programs: `rankd score` and `rankd-client score` (against a real
// `rankd serve`, the tiny model) read examples/requests.jsonl and give the same scores; a bad line
// gives rankd-client an error naming the line and the field.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/common/golden.h"
#include "tests/server/test_server.h"

namespace rankd::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using rankd::testing::TestServer;

constexpr char kExamples[] = RANKD_EXAMPLES_DIR "/requests.jsonl";

struct Output {
  int exit_code;
  std::vector<Json> lines;  // stdout, one JSON value per line
};

// Runs bin/<args> and parses its stdout.
Output RunBinary(const std::string& args) {
  const std::string cmd = absl::StrCat(RANKD_BINARY_DIR, "/bin/", args, " 2>/dev/null");
  FILE* pipe = ::popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  if (pipe == nullptr) return {-1, {}};
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  Output run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, {}};
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);) {
    run.lines.push_back(Json::parse(l, nullptr, /*allow_exceptions=*/false));
    EXPECT_FALSE(run.lines.back().is_discarded()) << cmd << ": " << l;
  }
  return run;
}

class RequestLinesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ =
        TestServer::Start(absl::StrCat("model:\n  dir: ", rankd::testing::ModelDir("llama-cls"),
                                       "\n  threads: 1\nworkers:\n  count: 1\n"))
            .release();
    ASSERT_NE(server_, nullptr);
    ASSERT_TRUE(server_->WaitReady(1, std::chrono::seconds(60))) << server_->Log();
  }
  static void TearDownTestSuite() { delete server_; }

  static Output Client(const std::string& input) {
    return RunBinary(
        absl::StrCat("rankd-client score --target ", server_->target(), " --input ", input));
  }

  static TestServer* server_;
};

TestServer* RequestLinesTest::server_ = nullptr;

TEST_F(RequestLinesTest, ExampleRequestsScoreTheSameThroughBothPrograms) {
  const Output offline =
      RunBinary(absl::StrCat("rankd score --threads 1 --model ",
                             rankd::testing::ModelDir("llama-cls"), " --input ", kExamples));
  const Output client = Client(kExamples);
  ASSERT_EQ(offline.exit_code, 0);
  ASSERT_EQ(client.exit_code, 0);
  ASSERT_GT(offline.lines.size(), 0u);
  ASSERT_EQ(client.lines.size(), offline.lines.size());
  for (size_t l = 0; l < offline.lines.size(); ++l) {
    const Json& want = offline.lines[l]["scores"];
    const Json& got = client.lines[l]["scores"];
    ASSERT_EQ(got.size(), want.size()) << "line " << l + 1 << ": " << client.lines[l].dump();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_PRED2(rankd::testing::WithinF32Tolerance, got[i]["score"].get<double>(),
                   want[i].get<double>())
          << "line " << l + 1 << " item " << i;
    }
  }
}

TEST_F(RequestLinesTest, ClientNamesTheLineAndFieldOfABadLine) {
  const std::string path = fs::temp_directory_path() / absl::StrCat("rankd_lines_", ::getpid());
  {
    std::ofstream f(path);
    f << R"({"query": "q", "items": [{"tokenIds": {"ids": [5, 6]}, "id": "a"}], "requestId": "r"})"
      << "\n"
      << R"({"query": "q", "items": [{"ids": [5, -6]}]})"
      << "\n";
  }
  const Output client = Client(path);
  fs::remove(path);
  EXPECT_EQ(client.exit_code, 1);
  ASSERT_EQ(client.lines.size(), 2u);
  EXPECT_EQ(client.lines[0]["request_id"], "r");
  ASSERT_EQ(client.lines[0]["scores"].size(), 1u);
  EXPECT_EQ(client.lines[0]["scores"][0]["id"], "a");
  EXPECT_EQ(client.lines[1]["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(client.lines[1]["error"]["message"],
            "line 2: items[0].ids[1]: must be a non-negative integer");
}

}  // namespace
}  // namespace rankd::cli
