// rankd-client: a small client of rankd.v1.Scorer.
//   rankd-client score  [--target HOST:PORT] [--input FILE|-]   request lines in (the JSON of
//                                                                `rankd score`), ScoreResponse
//                                                                JSON lines out; each call
//                                                                carries x-rankd-affinity
//   rankd-client health [--target HOST:PORT] [--service NAME]
// Both take --tls-ca, --tls-cert, --tls-key and --api-key (channel.h) for a secured server.
// Load generation is `rankd-bench load`.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "affinity.h"
#include "channel.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rankd/cli/flag_set.h"
#include "rankd/cli/request_line.h"
#include "rankd/common/grpc_status.h"
#include "rankd/common/logging.h"
#include "rankd/v1/scorer.grpc.pb.h"
#include "request_proto.h"

namespace {

using rankd::cli::FlagSet;
using rankd::cli::ParseCommandFlags;
using rankd::v1::ScoreRequest;
using rankd::v1::ScoreResponse;

constexpr char kUsage[] =
    "rankd-client: calls rankd.v1.Scorer on a running `rankd serve`.\n"
    "\n"
    "usage: rankd-client <command> [flags]   (rankd-client <command> --help for its flags)\n"
    "\n"
    "commands:\n"
    "  score    one request per input line, the request lines of `rankd score` (README.md,\n"
    "           \"Request lines\"), e.g. {\"query\": \"q\", \"items\": [\"a\", {\"ids\": [5]}]},\n"
    "           and one ScoreResponse JSON line out per request (or {\"error\": ...}); each\n"
    "           call carries x-rankd-affinity, the hash of its query a balancer routes on\n"
    "  health   grpc.health.v1 Check of the server (\"\") and of rankd.v1.Scorer\n"
    "\n"
    "Load generation (open or closed loop, latency percentiles): rankd-bench load.\n";

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(
    const std::string& target, const rankd::client::ChannelSecurity& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  return rankd::client::CreateChannel(target, security, args);
}

// The body of a JSON string (without its quotes); bytes that are not UTF-8 become U+FFFD, so the
// line stays valid JSON whatever the message holds.
std::string JsonEscape(absl::string_view s) {
  return rankd::EscapeLogMessage(s, rankd::LogFormat::kJson);
}

int Score(int argc, char** argv) {
  FlagSet flags(
      "rankd-client score [--target HOST:PORT] [--input FILE|-] [--deadline-ms N]\n"
      "Sends each input line, a request line as `rankd score` reads it (README.md, \"Request "
      "lines\"),\nand prints the ScoreResponse as one JSON line.");
  std::string target = "127.0.0.1:50051", input = "-";
  int deadline_ms = 30000;
  flags.String("target", &target, "server address");
  flags.String("input", &input, "JSON-lines file, - for stdin");
  flags.Int("deadline-ms", &deadline_ms, "deadline per call");
  rankd::client::ChannelSecurity security;
  rankd::client::AddChannelSecurityFlags(flags, &security);
  if (auto exit_code = ParseCommandFlags(flags, argc, argv, 2, "rankd-client score")) {
    return *exit_code;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Connect(target, security);
  if (!channel.ok()) {
    std::fprintf(stderr, "rankd-client score: %s\n",
                 std::string(channel.status().message()).c_str());
    return 2;
  }
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
  auto stub = rankd::v1::Scorer::NewStub(*channel);
  google::protobuf::util::JsonPrintOptions print;
  print.always_print_primitive_fields = true;
  print.preserve_proto_field_names = true;
  int failures = 0;
  int line_number = 0;
  std::string line;
  while (std::getline(*in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = rankd::cli::ParseRequestLine(line);
    if (!parsed.ok()) {
      std::printf(
          "{\"error\": {\"code\": \"INVALID_ARGUMENT\", \"message\": \"%s\"}}\n",
          JsonEscape(absl::StrCat("line ", line_number, ": ", parsed.status().message())).c_str());
      ++failures;
      continue;
    }
    const ScoreRequest request = rankd::client::ToProtoRequest(*parsed);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    context.AddMetadata(rankd::client::kAffinityHeader, rankd::client::AffinityKey(request));
    ScoreResponse response;
    const grpc::Status s = stub->Score(&context, request, &response);
    if (!s.ok()) {
      std::printf("{\"error\": {\"code\": \"%s\", \"message\": \"%s\"}}\n",
                  rankd::GrpcCodeName(s.error_code()).c_str(),
                  JsonEscape(s.error_message()).c_str());
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
  rankd::client::ChannelSecurity security;
  rankd::client::AddChannelSecurityFlags(flags, &security);
  if (auto exit_code = ParseCommandFlags(flags, argc, argv, 2, "rankd-client health")) {
    return *exit_code;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = Connect(target, security);
  if (!channel.ok()) {
    std::fprintf(stderr, "rankd-client health: %s\n",
                 std::string(channel.status().message()).c_str());
    return 2;
  }
  auto stub = grpc::health::v1::Health::NewStub(*channel);
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
      std::printf("%-18s %s: %s\n", label.c_str(), rankd::GrpcCodeName(s.error_code()).c_str(),
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
  if (command == "load") {
    std::fputs("rankd-client: `load` moved to `rankd-bench load` (rankd-bench load --help)\n",
               stderr);
    return 2;
  }
  std::fprintf(stderr, "rankd-client: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
