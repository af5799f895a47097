// rankd-client: a small client of rankd.v1.Scorer.
//   rankd-client score  [--target HOST:PORT] [--input FILE|-]   proto3-JSON ScoreRequest lines in,
//                                                                ScoreResponse JSON lines out
//   rankd-client health [--target HOST:PORT] [--service NAME]
//   rankd-client load   [--target HOST:PORT] [--connections C] [--duration-s S] [--items N] ...
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "flag_set.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rankd/v1/scorer.grpc.pb.h"

namespace {

using rankd::cli::FlagSet;
using rankd::v1::ScoreRequest;
using rankd::v1::ScoreResponse;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "rankd-client: calls rankd.v1.Scorer on a running `rankd serve`.\n"
    "\n"
    "usage: rankd-client <command> [flags]   (rankd-client <command> --help for its flags)\n"
    "\n"
    "commands:\n"
    "  score    one ScoreRequest per input line in proto3 JSON, e.g.\n"
    "           {\"query\": \"q\", \"items\": [{\"text\": \"a\"}, {\"tokenIds\": {\"ids\": [5, "
    "6]}}]}\n"
    "           and one ScoreResponse JSON line out per request (or {\"error\": ...})\n"
    "  health   grpc.health.v1 Check of the server (\"\") and of rankd.v1.Scorer\n"
    "  load     closed-loop load: latency percentiles and items/s\n";

std::shared_ptr<grpc::Channel> Connect(const std::string& target, bool own_connection = false) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  // Each load connection gets its own TCP connection rather than sharing one.
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

std::string CodeName(grpc::StatusCode code) {
  static const char* kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  const int c = static_cast<int>(code);
  return c >= 0 && c <= 16 ? kNames[c] : absl::StrCat("CODE_", c);
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out;
}

int ParseFlags(FlagSet& flags, int argc, char** argv) {
  absl::Status s = flags.Parse(argc, argv, 2, nullptr);
  if (s.ok()) return -1;
  if (absl::IsCancelled(s)) return 0;
  std::fprintf(stderr, "rankd-client %s: %s\n", argv[1], std::string(s.message()).c_str());
  return 2;
}

int Score(int argc, char** argv) {
  FlagSet flags(
      "rankd-client score [--target HOST:PORT] [--input FILE|-] [--deadline-ms N]\n"
      "Sends each input line (a ScoreRequest in proto3 JSON) and prints the ScoreResponse as one "
      "JSON line.");
  std::string target = "127.0.0.1:50051", input = "-";
  int deadline_ms = 30000;
  flags.String("target", &target, "server address");
  flags.String("input", &input, "JSON-lines file, - for stdin");
  flags.Int("deadline-ms", &deadline_ms, "deadline per call");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  std::ifstream file;
  std::istream* in = &std::cin;
  if (input != "-") {
    file.open(input);
    if (!file) {
      std::fprintf(stderr, "rankd-client score: --input %s: cannot open\n", input.c_str());
      return 2;
    }
    in = &file;
  }
  auto stub = rankd::v1::Scorer::NewStub(Connect(target));
  google::protobuf::util::JsonPrintOptions print;
  print.always_print_primitive_fields = true;
  print.preserve_proto_field_names = true;
  int failures = 0;
  std::string line;
  while (std::getline(*in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ScoreRequest request;
    auto parsed = google::protobuf::util::JsonStringToMessage(line, &request);
    if (!parsed.ok()) {
      std::printf(
          "{\"error\": {\"code\": \"INVALID_ARGUMENT\", \"message\": \"%s\"}}\n",
          JsonEscape(absl::StrCat("not a ScoreRequest: ", parsed.message().as_string())).c_str());
      ++failures;
      continue;
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    ScoreResponse response;
    const grpc::Status s = stub->Score(&context, request, &response);
    if (!s.ok()) {
      std::printf("{\"error\": {\"code\": \"%s\", \"message\": \"%s\"}}\n",
                  CodeName(s.error_code()).c_str(), JsonEscape(s.error_message()).c_str());
      ++failures;
      continue;
    }
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(response, &json, print);
    std::printf("%s\n", json.c_str());
  }
  return failures > 0 ? 1 : 0;
}

int Health(int argc, char** argv) {
  FlagSet flags(
      "rankd-client health [--target HOST:PORT] [--service NAME]\n"
      "Checks grpc.health.v1: the server (\"\") and rankd.v1.Scorer, or --service. Exit status 0 "
      "when all are SERVING.");
  std::string target = "127.0.0.1:50051", service;
  flags.String("target", &target, "server address");
  flags.String("service", &service, "one service to check");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  auto stub = grpc::health::v1::Health::NewStub(Connect(target));
  const std::vector<std::string> services = flags.WasSet("service")
                                                ? std::vector<std::string>{service}
                                                : std::vector<std::string>{"", "rankd.v1.Scorer"};
  bool all_serving = true;
  for (const std::string& name : services) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(name);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status s = stub->Check(&context, request, &response);
    const std::string label = name.empty() ? "(server)" : name;
    if (!s.ok()) {
      std::printf("%-18s %s: %s\n", label.c_str(), CodeName(s.error_code()).c_str(),
                  s.error_message().c_str());
      all_serving = false;
    } else {
      std::printf(
          "%-18s %s\n", label.c_str(),
          grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
      all_serving &= response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
    }
  }
  return all_serving ? 0 : 1;
}

// Requests of `items` synthetic text items of `item_words` words each (a fixed seed: every run
// sends the same texts).
std::vector<ScoreRequest> SyntheticRequests(int count, int items, int item_words, int query_words) {
  static const char* kWords[] = {
      "senior",  "software", "engineer",   "remote",   "python",  "kubernetes",  "terraform",
      "cuda",    "manager",  "product",    "data",     "berlin",  "paris",       "sao",
      "paulo",   "team",     "lead",       "backend",  "systems", "ranking",     "search",
      "machine", "learning", "platform",   "security", "cloud",   "startup",     "salary",
      "hybrid",  "years",    "experience", "go",       "rust",    "distributed", "payments"};
  const int n_words = sizeof(kWords) / sizeof(kWords[0]);
  std::mt19937 rng(7);
  auto text = [&](int words) {
    std::string t;
    for (int w = 0; w < words; ++w) absl::StrAppend(&t, w ? " " : "", kWords[rng() % n_words]);
    return t;
  };
  std::vector<ScoreRequest> requests(count);
  for (ScoreRequest& r : requests) {
    r.set_query(text(query_words));
    for (int i = 0; i < items; ++i) r.add_items()->set_text(text(item_words));
  }
  return requests;
}

int Load(int argc, char** argv) {
  FlagSet flags(
      "rankd-client load [--target HOST:PORT] [--connections C] [--duration-s S] [--items N]\n"
      "                  [--item-words W] [--query-words Q] [--warmup-s S]\n"
      "Closed loop: C connections each send a Score call, wait for the answer, send the next. "
      "Reports latency percentiles and throughput over the measured period.");
  std::string target = "127.0.0.1:50051";
  int connections = 4, items = 50, item_words = 60, query_words = 8;
  double duration_s = 10, warmup_s = 1;
  flags.String("target", &target, "server address");
  flags.Int("connections", &connections, "concurrent connections (one call in flight each)");
  flags.Double("duration-s", &duration_s, "measured seconds");
  flags.Double("warmup-s", &warmup_s, "seconds of calls before measuring");
  flags.Int("items", &items, "items per request");
  flags.Int("item-words", &item_words, "words per item");
  flags.Int("query-words", &query_words, "words per query");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  const std::vector<ScoreRequest> requests = SyntheticRequests(64, items, item_words, query_words);

  std::mutex mu;
  std::vector<double> latencies_ms;
  std::map<std::string, int64_t> failures;
  int64_t items_scored = 0, item_tokens = 0;
  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_from =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup_s));
  const Clock::time_point end = measure_from + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(duration_s));
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      auto stub = rankd::v1::Scorer::NewStub(Connect(target, /*own_connection=*/true));
      for (size_t k = c; Clock::now() < end; k += connections) {
        const ScoreRequest& request = requests[k % requests.size()];
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        ScoreResponse response;
        const Clock::time_point t0 = Clock::now();
        const grpc::Status s = stub->Score(&context, request, &response);
        const Clock::time_point t1 = Clock::now();
        if (t0 < measure_from || t1 > end) continue;  // only calls wholly inside the window
        std::lock_guard<std::mutex> lock(mu);
        if (s.ok()) {
          latencies_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          items_scored += response.usage().items_scored();
          item_tokens += response.usage().item_tokens();
        } else {
          ++failures[CodeName(s.error_code())];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double p) {
    if (latencies_ms.empty()) return 0.0;
    const size_t i =
        std::min(latencies_ms.size() - 1,
                 static_cast<size_t>(p / 100.0 * static_cast<double>(latencies_ms.size())));
    return latencies_ms[i];
  };
  double mean = 0;
  for (double l : latencies_ms) mean += l;
  if (!latencies_ms.empty()) mean /= static_cast<double>(latencies_ms.size());
  int64_t failed = 0;
  std::string failed_codes;
  for (const auto& [code, n] : failures) {
    failed += n;
    absl::StrAppend(&failed_codes, " ", code, "=", n);
  }
  std::printf(
      "rankd-client load: %s, %d connections, %d items x ~%d words per request, %.1f s "
      "measured\n",
      target.c_str(), connections, items, item_words, duration_s);
  std::printf("requests: %zu ok, %lld failed%s\n", latencies_ms.size(),
              static_cast<long long>(failed), failed_codes.c_str());
  std::printf("latency ms: mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", mean, pct(50),
              pct(90), pct(99), latencies_ms.empty() ? 0.0 : latencies_ms.back());
  std::printf("throughput: %.1f requests/s, %.1f items/s, %.0f item tokens/s\n",
              static_cast<double>(latencies_ms.size()) / duration_s,
              static_cast<double>(items_scored) / duration_s,
              static_cast<double>(item_tokens) / duration_s);
  return failed > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h" ||
      std::string(argv[1]) == "help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "score") return Score(argc, argv);
  if (command == "health") return Health(argc, argv);
  if (command == "load") return Load(argc, argv);
  std::fprintf(stderr, "rankd-client: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
