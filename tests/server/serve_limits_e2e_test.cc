// End-to-end tests of what a call may make `rankd serve` do and hold (issue 24's items 2, 3, 11
// and 12): deadline admission under mixed long and short calls, the memory of answers nobody
// reads, huge embedding values, and scores among different batch neighbours. A real server with
// its worker processes; timeouts are generous liveness bounds, and the deadlines that must be met
// are set from the latencies measured in the same run, many times over.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/golden.h"
#include "tests/server/test_server.h"

namespace rankd::testing {
namespace {

using grpc::StatusCode;
using rankd::v1::ScoreRequest;
using rankd::v1::ScoreResponse;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kLiveness = seconds(60);

// The server of `config`, with its one worker up.
std::unique_ptr<TestServer> StartReady(const std::string& config) {
  auto server = TestServer::Start(config);
  if (server == nullptr) return nullptr;
  EXPECT_TRUE(server->WaitReady(1, kLiveness)) << server->Log();
  return server;
}

// Through a channel of its own that takes answers of any size (gRPC's default is 4 MiB).
grpc::Status Score(const TestServer& server, const ScoreRequest& request, ScoreResponse* response,
                   std::optional<milliseconds> timeout = std::nullopt) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto stub = rankd::v1::Scorer::NewStub(
      grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout.value_or(kLiveness));
  return stub->Score(&context, request, response);
}

// `n` items of `tokens` token ids each after the golden case's prefix.
ScoreRequest IdItems(const GoldenCase& c, int n, int tokens) {
  ScoreRequest r;
  r.mutable_query_ids()->Add(c.prefix_ids.begin(), c.prefix_ids.end());
  for (int i = 0; i < n; ++i) {
    auto* ids = r.add_items()->mutable_token_ids()->mutable_ids();
    for (int t = 0; t < tokens; ++t) ids->Add(4 + (7 * i + 13 * t) % 1000);
  }
  return r;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// llama-cls on one worker of one CPU thread, with more sections (`sections`) and more lines of
// the workers section (`worker_lines`).
std::string OneWorkerConfig(const std::string& sections = "",
                            const std::string& worker_lines = "") {
  return absl::StrCat("model:\n  dir: ", ModelDir("llama-cls"), "\n  threads: 1\n", sections,
                      "workers:\n  count: 1\n", worker_lines);
}

// ---- 2. deadline admission ------------------------------------------------------------------

// One worker, one call at a time, items long enough for one expensive call.
std::string AdmissionConfig() {
  return OneWorkerConfig("limits:\n  max_item_tokens: 1000\n  max_request_tokens: 1000000\n",
                         "  max_inflight: 1\n");
}

// The case: after one call with a long item, every short call with a deadline it meets
// many times over was refused at once, and since refused calls measure nothing, for good. Here
// short calls (50 items of 10 tokens) with deadlines of 20 times their latency run between long
// calls (one item of 1000 tokens) with deadlines of 5 times theirs: none is refused. Calls whose
// deadline is far below their cost still are, at admission, with the estimate in the message.
// (The calls skip the result cache, which would answer repeated ones without a worker.)
TEST(AdmissionTest, MixedLongAndShortCallsWithMeetableDeadlinesAreAllAdmitted) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(AdmissionConfig());
  ASSERT_NE(server, nullptr);
  ScoreRequest short_call = IdItems(golden.cases[0], 50, 10);
  ScoreRequest long_call = IdItems(golden.cases[0], 1, 1000);
  short_call.set_skip_cache(true);
  long_call.set_skip_cache(true);
  ScoreResponse response;
  // Their latencies, without deadlines: the slowest of a few.
  double short_s = 0, long_s = 0;
  for (int i = 0; i < 5; ++i) {
    const Clock::time_point start = Clock::now();
    ASSERT_TRUE(Score(*server, short_call, &response).ok());
    short_s = std::max(short_s, SecondsSince(start));
  }
  const Clock::time_point start = Clock::now();
  ASSERT_TRUE(Score(*server, long_call, &response).ok());
  long_s = SecondsSince(start);
  const auto short_deadline = std::chrono::duration_cast<milliseconds>(
      std::chrono::duration<double>(std::max(20 * short_s, 0.25)));
  const auto long_deadline = std::chrono::duration_cast<milliseconds>(
      std::chrono::duration<double>(std::max(5 * long_s, 1.0)));
  int short_refused = 0, long_refused = 0, short_calls = 0;
  std::string refusal;
  for (int i = 0; i < 30; ++i) {
    const bool is_long = i % 10 == 0;
    const grpc::Status s = Score(*server, is_long ? long_call : short_call, &response,
                                 is_long ? long_deadline : short_deadline);
    short_calls += !is_long;
    if (s.error_code() == StatusCode::DEADLINE_EXCEEDED) {
      ++(is_long ? long_refused : short_refused);
      if (refusal.empty()) refusal = s.error_message();
    } else {
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
  }
  std::printf(
      "[figures] %d of %d short calls (%.0f ms alone at most) refused with deadlines of "
      "%lld ms; long calls %.0f ms alone at most\n",
      short_refused, short_calls, 1e3 * short_s, static_cast<long long>(short_deadline.count()),
      1e3 * long_s);
  EXPECT_EQ(short_refused, 0) << "of " << short_calls << " short calls with "
                              << short_deadline.count() << " ms (each took at most "
                              << 1e3 * short_s << " ms alone; long calls " << 1e3 * long_s
                              << " ms): " << refusal;
  EXPECT_EQ(long_refused, 0) << refusal;

  // 1000 long items (about 1000 long calls' work) in a second: refused at admission.
  ScoreRequest huge = IdItems(golden.cases[0], 1000, 1000);
  huge.set_skip_cache(true);
  for (int i = 0; i < 3; ++i) {
    const grpc::Status s = Score(*server, huge, &response, seconds(1));
    EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED);
    EXPECT_THAT(s.error_message(), HasSubstr("deadline cannot be met"));
    EXPECT_THAT(s.error_message(), HasSubstr("ms needed"));
  }
}

}  // namespace
}  // namespace rankd::testing
