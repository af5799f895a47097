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

int64_t RequestsWithCode(const TestServer& server, const std::string& code) {
  return static_cast<int64_t>(
      server.Metric(absl::StrCat("rankd_requests_total{code=\"", code, "\"}")).value_or(0));
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

// ---- 3. answers nobody reads ----------------------------------------------------------------

// Whether this build runs under ASan or TSan, whose allocators replace glibc's in the front end
// too (ASan keeps what is freed in a quarantine, and malloc_trim does not reach them): resident
// memory says nothing about what the front end holds there.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RANKD_TEST_SANITIZED
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(RANKD_TEST_SANITIZED)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// The front end's resident memory (VmRSS), in bytes; 0 when unreadable.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v(line);
    if (absl::ConsumePrefix(&v, "VmRSS:")) {
      int64_t kb = 0;
      if (absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(v), " kB"), &kb)) {
        return kb * 1024;
      }
    }
  }
  return 0;
}

// A gRPC call whose client never reads its answer, on a raw HTTP/2 connection of its own: its
// SETTINGS give every stream a receive window of 0 bytes, so that the server can send the
// answer's headers and not one byte of its message, and holds the rest. The request is sent in
// full first (reading the server's SETTINGS and window updates until then); from then on nothing
// is read. The destructor closes the connection, which ends the call (cancelled).
class UnreadCall {
 public:
  UnreadCall() = default;
  UnreadCall(const UnreadCall&) = delete;
  UnreadCall& operator=(const UnreadCall&) = delete;
  ~UnreadCall() {
    if (fd_ >= 0) close(fd_);
  }

  // `method`: e.g. "/rankd.v1.Scorer/Score". False when the connection fails or the server
  // resets the stream or the connection before the request is sent.
  bool Send(int port, const std::string& method, const std::string& message) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return false;
    }
    std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    out += Frame(kSettings, 0, 0, Setting(kInitialWindowSize, 0));
    std::string headers;
    for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
             {":method", "POST"},
             {":scheme", "http"},
             {":path", method},
             {":authority", absl::StrCat("127.0.0.1:", port)},
             {"content-type", "application/grpc"},
             {"te", "trailers"}}) {
      // HPACK: a literal field without indexing, new name, no Huffman (lengths below 127).
      headers += '\0';
      headers += static_cast<char>(name.size());
      headers += name;
      headers += static_cast<char>(value.size());
      headers += value;
    }
    out += Frame(kHeaders, kEndHeaders, kStream, headers);
    if (!WriteAll(out)) return false;
    // The gRPC message: no compression, 4 bytes of length, the bytes.
    std::string body(5, '\0');
    for (int i = 0; i < 4; ++i) body[1 + i] = static_cast<char>(message.size() >> (24 - 8 * i));
    body += message;
    int64_t connection_window = 65535, stream_window = 65535, peer_initial = 65535;
    bool settings_acked = false;
    size_t sent = 0;
    while (sent < body.size() || !settings_acked) {
      const int64_t n = std::min<int64_t>(
          {16384, connection_window, stream_window, static_cast<int64_t>(body.size() - sent)});
      if (sent < body.size() && n > 0) {
        const bool last = sent + n == body.size();
        if (!WriteAll(Frame(kData, last ? kEndStream : 0, kStream, body.substr(sent, n)))) {
          return false;
        }
        sent += n;
        connection_window -= n;
        stream_window -= n;
        continue;
      }
      uint8_t type = 0, flags = 0;
      uint32_t stream = 0;
      std::string payload;
      if (!ReadFrame(&type, &flags, &stream, &payload)) return false;
      if (type == kSettings && !(flags & kAck)) {
        for (size_t p = 0; p + 6 <= payload.size(); p += 6) {
          if (Be(payload, p, 2) == kInitialWindowSize) {
            const int64_t initial = Be(payload, p + 2, 4);
            stream_window += initial - peer_initial;
            peer_initial = initial;
          }
        }
        if (!WriteAll(Frame(kSettings, kAck, 0, ""))) return false;
        settings_acked = true;
      } else if (type == kWindowUpdate) {
        (stream == 0 ? connection_window : stream_window) += Be(payload, 0, 4) & 0x7fffffff;
      } else if (type == kPing && !(flags & kAck)) {
        if (!WriteAll(Frame(kPing, kAck, 0, payload))) return false;
      } else if (type == kRstStream || type == kGoaway) {
        return false;
      }
    }
    return true;
  }

 private:
  static constexpr uint8_t kData = 0, kHeaders = 1, kRstStream = 3, kSettings = 4, kPing = 6,
                           kGoaway = 7, kWindowUpdate = 8;
  static constexpr uint8_t kEndStream = 1, kAck = 1, kEndHeaders = 4;
  static constexpr uint16_t kInitialWindowSize = 4;
  static constexpr uint32_t kStream = 1;

  static std::string Frame(uint8_t type, uint8_t flags, uint32_t stream,
                           const std::string& payload) {
    std::string f;
    for (int shift : {16, 8, 0}) f += static_cast<char>(payload.size() >> shift);
    f += static_cast<char>(type);
    f += static_cast<char>(flags);
    for (int shift : {24, 16, 8, 0}) f += static_cast<char>(stream >> shift);
    return f + payload;
  }
  static std::string Setting(uint16_t id, uint32_t value) {
    std::string s;
    for (int shift : {8, 0}) s += static_cast<char>(id >> shift);
    for (int shift : {24, 16, 8, 0}) s += static_cast<char>(value >> shift);
    return s;
  }
  // The big-endian number of `bytes` bytes at `at`.
  static int64_t Be(const std::string& s, size_t at, int bytes) {
    int64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = v << 8 | static_cast<uint8_t>(s[at + i]);
    return v;
  }
  bool WriteAll(const std::string& bytes) {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  bool ReadAll(char* out, size_t size) {
    for (size_t done = 0; done < size;) {
      const ssize_t n = read(fd_, out + done, size - done);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  bool ReadFrame(uint8_t* type, uint8_t* flags, uint32_t* stream, std::string* payload) {
    std::string header(9, '\0');
    if (!ReadAll(header.data(), header.size())) return false;
    *type = static_cast<uint8_t>(header[3]);
    *flags = static_cast<uint8_t>(header[4]);
    *stream = static_cast<uint32_t>(Be(header, 5, 4) & 0x7fffffff);
    payload->assign(static_cast<size_t>(Be(header, 0, 3)), '\0');
    return ReadAll(payload->data(), payload->size());
  }

  int fd_ = -1;
};

constexpr int64_t kMiB = 1 << 20;

// Ids of 256 KiB allowed, a call's answer up to 20 MiB, answers of all calls up to 40 MiB.
std::string AnswerConfig() {
  return OneWorkerConfig(
      absl::StrCat("server:\n  stream_chunk_items: 64\n  max_buffered_answer_bytes: ", 40 * kMiB,
                   "\nlimits:\n  max_message_bytes: ", 32 * kMiB, "\n  max_id_bytes: ", 256 * 1024,
                   "\n  max_answer_bytes: ", 20 * kMiB, "\n"));
}

// `n` one-token items with ids of `id_bytes` bytes each: an answer of about n x id_bytes.
ScoreRequest BigIds(const GoldenCase& c, int n, int64_t id_bytes) {
  ScoreRequest r = IdItems(c, n, 1);
  for (int i = 0; i < n; ++i) {
    r.mutable_items(i)->set_id(std::string(static_cast<size_t>(id_bytes), 'a' + i % 26));
  }
  return r;
}

// The case: Score and ScoreStream calls of 64 items with ids of 250 KB, whose answers
// are never read, grew the front end by about 60 MB a call, for good. Now each call reserves its
// answer's bytes at admission: two such answers fit the 40 MiB of
// server.max_buffered_answer_bytes, the other calls fail RESOURCE_EXHAUSTED at once, the front
// end holds about what the budget allows, and gives it back when the calls end.
TEST(AnswerMemoryTest, AnswersNobodyReadsAreBoundedAndTheirMemoryGoesWhenTheCallsEnd) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(AnswerConfig());
  ASSERT_NE(server, nullptr);
  const int port = std::stoi(std::string(absl::StripPrefix(server->target(), "127.0.0.1:")));
  const ScoreRequest request = BigIds(golden.cases[0], 64, 250000);
  const std::string bytes = request.SerializeAsString();
  // Read once, so that what one call allocates in passing is in the baseline.
  ScoreResponse response;
  ASSERT_TRUE(Score(*server, request, &response).ok());
  ASSERT_EQ(response.scores(63).id().size(), 250000u);
  ASSERT_TRUE(server->WaitForMetric("rankd_answer_bytes_held", 0, kLiveness));
  std::this_thread::sleep_for(milliseconds(1500));  // what it freed given back (once a second)
  const int64_t before = ResidentBytes(server->pid());
  constexpr int kCalls = 12;
  std::vector<std::unique_ptr<UnreadCall>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::make_unique<UnreadCall>());
    ASSERT_TRUE(calls.back()->Send(
        port, i % 2 == 0 ? "/rankd.v1.Scorer/Score" : "/rankd.v1.Scorer/ScoreStream", bytes));
  }
  // Every call refused or scored (a ScoreStream call held unread is never counted as answered),
  // and its answer made.
  const Clock::time_point wait_start = Clock::now();
  while (!(RequestsWithCode(*server, "RESOURCE_EXHAUSTED") == kCalls - 2 &&
           server->Metric("rankd_calls_in_flight") == 0 &&
           server->Metric("rankd_queue_depth") == 0) &&
         Clock::now() - wait_start < kLiveness) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(RequestsWithCode(*server, "RESOURCE_EXHAUSTED"), kCalls - 2);
  std::this_thread::sleep_for(milliseconds(500));  // the last answers encoded
  const int64_t held = ResidentBytes(server->pid());
  // One that reads is refused too while the budget is spent, naming it.
  grpc::Status s = Score(*server, request, &response);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("server.max_buffered_answer_bytes=41943040"));
  std::printf("[figures] front end RSS: %.0f MiB before, %.0f MiB with %d unread calls",
              static_cast<double>(before) / kMiB, static_cast<double>(held) / kMiB, kCalls);
  // Two answers of 16 MB held, and what the refused calls' requests left: well under 12 x 60 MB.
  if (!kSanitized) EXPECT_LT(held - before, 160 * kMiB);
  calls.clear();
  EXPECT_TRUE(server->WaitForMetric("rankd_answer_bytes_held", 0, kLiveness));
  // gRPC frees the calls' buffers as it reaps them, and the front end gives back what lies free
  // once a second.
  int64_t after = 0;
  const Clock::time_point release_start = Clock::now();
  do {
    std::this_thread::sleep_for(milliseconds(100));
    after = ResidentBytes(server->pid());
  } while (!kSanitized && after - before > 40 * kMiB && Clock::now() - release_start < seconds(10));
  std::printf(", %.0f MiB after they ended\n", static_cast<double>(after) / kMiB);
  if (!kSanitized) EXPECT_LT(after - before, 40 * kMiB);
  // And the server still serves calls that read.
  s = Score(*server, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST(AnswerMemoryTest, IdsAndAnswersOverTheirLimitsAreRefusedNamingThem) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(AnswerConfig());
  ASSERT_NE(server, nullptr);
  ScoreResponse response;
  // An id over limits.max_id_bytes, an item's or the request's.
  ScoreRequest request = BigIds(golden.cases[0], 3, 1000);
  request.mutable_items(2)->set_id(std::string(256 * 1024 + 1, 'x'));
  grpc::Status s = Score(*server, request, &response);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "items[2].id: 262145 bytes exceeds max_id_bytes=262144");
  request = BigIds(golden.cases[0], 3, 1000);
  request.set_request_id(std::string(256 * 1024 + 1, 'r'));
  s = Score(*server, request, &response);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "request_id: 262145 bytes exceeds max_id_bytes=262144");
  // An answer over limits.max_answer_bytes (90 ids of 250 KB: 22.5 MB), Score and ScoreStream.
  request = BigIds(golden.cases[0], 90, 250000);
  s = Score(*server, request, &response);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("over limits.max_answer_bytes=20971520"));
  auto stub = server->NewScorer();
  grpc::ClientContext context;
  auto reader = stub->ScoreStream(&context, request);
  while (reader->Read(&response)) {
  }
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("over limits.max_answer_bytes=20971520"));
  EXPECT_EQ(server->Metric("rankd_answer_bytes_held"), 0);
}

// ---- 11. huge embedding values --------------------------------------------------------------

// An item of embedding rows whose values are all `value`, after the golden case's prefix.
ScoreRequest EmbeddingOf(const GoldenCase& c, int hidden, float value) {
  ScoreRequest r;
  r.mutable_query_ids()->Add(c.prefix_ids.begin(), c.prefix_ids.end());
  auto* e = r.add_items()->mutable_embedding();
  e->set_rows(2);
  for (int j = 0; j < 2 * hidden; ++j) e->add_values(j % 2 ? value : -value);
  return r;
}

// The case: values of 1e20 (finite) were scored exactly 0.0, silently. Values beyond
// kMaxEmbeddingMagnitude (1e4) are refused naming the element; up to it, scored.
TEST(EmbeddingBoundTest, HugeValuesAreRefusedNamingTheElementAndTheBound) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(OneWorkerConfig());
  ASSERT_NE(server, nullptr);
  constexpr int kHidden = 64;  // llama-cls
  ScoreResponse response;
  grpc::Status s = Score(*server, EmbeddingOf(golden.cases[0], kHidden, 1e20f), &response);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT)
      << "scored " << (response.scores_size() ? response.scores(0).score() : NAN);
  EXPECT_EQ(s.error_message(),
            "items[0].embedding.values[0]: is -1e+20 (row 0, column 0); values must be finite, of "
            "magnitude at most 10000");
  s = Score(*server, EmbeddingOf(golden.cases[0], kHidden, 1e4f), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(std::isfinite(response.scores(0).score()));
}

// ---- 12. scores among different batch neighbours --------------------------------------------

// The bound docs/config.md (result_cache) and result_cache.h give for the difference between a
// (query, item)'s score alone and among other items, on the CPU backend: relative to
// max(1, |score|).
constexpr double kNeighbourBound = 1e-5;

// The same (query, item) scored alone, and among neighbours of other lengths before and after it,
// in calls that bypass the result cache: the scores differ by at most kNeighbourBound. The
// largest difference seen is printed for the docs.
TEST(BatchNeighbourTest, AnItemsScoreAmongOtherItemsIsWithinTheBoundOfItsScoreAlone) {
  const Golden golden = LoadGolden("llama-cls");
  auto server = StartReady(OneWorkerConfig());
  ASSERT_NE(server, nullptr);
  double largest = 0;
  int differing = 0, compared = 0;
  for (const GoldenCase& c : golden.cases) {
    for (size_t i = 0; i < c.items.size(); ++i) {
      ScoreRequest alone;
      alone.set_skip_cache(true);
      alone.mutable_query_ids()->Add(c.prefix_ids.begin(), c.prefix_ids.end());
      alone.add_items()->mutable_token_ids()->mutable_ids()->Add(c.items[i].ids.begin(),
                                                                 c.items[i].ids.end());
      ScoreResponse one;
      ASSERT_TRUE(Score(*server, alone, &one).ok());
      // Neighbours: every other item of the case, before and after it, after 1 or 14 filler
      // items of 1 to 60 tokens.
      for (int variant = 0; variant < 2; ++variant) {
        ScoreRequest among = alone;
        among.clear_items();
        int at = 0;
        const int fillers = 1 + 13 * variant;
        for (int f = 0; f < fillers; ++f) {
          *among.add_items() = IdItems(c, 1, 1 + (17 * f + 5 * variant) % 60).items(0);
        }
        for (size_t j = 0; j < c.items.size(); ++j) {
          if (j == i) at = among.items_size();
          among.add_items()->mutable_token_ids()->mutable_ids()->Add(c.items[j].ids.begin(),
                                                                     c.items[j].ids.end());
        }
        ScoreResponse many;
        ASSERT_TRUE(Score(*server, among, &many).ok());
        const double a = one.scores(0).score(), b = many.scores(at).score();
        const double diff = std::abs(a - b) / std::max(1.0, std::abs(a));
        largest = std::max(largest, diff);
        differing += a != b;
        ++compared;
        EXPECT_LE(diff, kNeighbourBound) << "item " << i << " alone " << a << ", among " << b;
      }
    }
  }
  std::printf(
      "[figures] %d of %d scores differ from the item's alone; largest difference %.3g "
      "(relative to max(1, |score|))\n",
      differing, compared, largest);
}

}  // namespace
}  // namespace rankd::testing
