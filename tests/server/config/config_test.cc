#include "rankd/server/config/config.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rankd/server/pool/worker_plan.h"

namespace rankd::server {
namespace {

using ::testing::HasSubstr;

TEST(ServeConfigTest, EmbeddedDefaultIsTheTinyCpuConfigWithTheDemoModel) {
  absl::StatusOr<ServeConfig> c = DefaultServeConfig();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(FinalizeServeConfig(&*c).ok());
  EXPECT_TRUE(std::filesystem::exists(c->model.engine.model_dir + "/config.json"))
      << c->model.engine.model_dir;
  EXPECT_EQ(c->model.name, "demo-jobs-reranker");
  EXPECT_EQ(c->model.engine.backend.kind, "cpu");
  EXPECT_EQ(c->workers.count, 2);
  EXPECT_TRUE(c->workers.all_gpus);
  EXPECT_EQ(c->server.listen, "127.0.0.1:50051");
  EXPECT_FALSE(c->model.engine.settings.head.has_value());  // "" means unset
  EXPECT_THAT(std::string(EmbeddedDefaultConfigText()), HasSubstr("max_message_bytes"));
}

TEST(ServeConfigTest, MaxInflightDefaultsByBackend) {
  for (const char* backend : {"cpu", "cuda"}) {
    absl::StatusOr<ServeConfig> c = ParseServeConfig(
        absl::StrCat("model:\n  dir: /m\n  backend: ", backend, "\n"), "/", "test");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->workers.max_inflight, 0);  // unset
    ASSERT_TRUE(FinalizeServeConfig(&*c).ok());
    EXPECT_EQ(c->workers.max_inflight,
              std::string(backend) == "cuda" ? kDefaultMaxInflightCuda : kDefaultMaxInflightCpu);
  }
  absl::StatusOr<ServeConfig> c = ParseServeConfig(
      "model:\n  dir: /m\n  backend: cuda\nworkers:\n  max_inflight: 2\n", "/", "t");
  ASSERT_TRUE(c.ok() && FinalizeServeConfig(&*c).ok());
  EXPECT_EQ(c->workers.max_inflight, 2);
  c = ParseServeConfig("model:\n  dir: /m\nworkers:\n  max_inflight: -1\n", "/", "t");
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(std::string(FinalizeServeConfig(&*c).message()), HasSubstr("workers.max_inflight"));
}

// workers.count 0 is one worker per GPU: with the cuda backend and no GPU list that is every
// visible GPU (the CUDA image runs `--backend cuda --workers 0` on a config without workers.gpus,
// which this check used to refuse before any GPU was looked at); the cpu backend has no GPUs.
TEST(ServeConfigTest, WorkerCountZeroMeansOnePerGpuWithTheCudaBackendOnly) {
  for (const char* gpus : {"", "  gpus: all\n", "  gpus: [0, 2]\n"}) {
    absl::StatusOr<ServeConfig> c = ParseServeConfig(
        absl::StrCat("model:\n  dir: /m\n  backend: cuda\nworkers:\n  count: 0\n", gpus), "/", "t");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(FinalizeServeConfig(&*c).ok()) << "gpus: '" << gpus << "'";
  }
  for (const char* gpus : {"", "  gpus: all\n", "  gpus: [0]\n"}) {
    absl::StatusOr<ServeConfig> c = ParseServeConfig(
        absl::StrCat("model:\n  dir: /m\n  backend: cpu\nworkers:\n  count: 0\n", gpus), "/", "t");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_THAT(std::string(FinalizeServeConfig(&*c).message()),
                HasSubstr("workers.count: must be positive with the cpu backend"))
        << "gpus: '" << gpus << "'";
  }
}

TEST(ServeConfigTest, ParsesEverySectionAndResolvesPathsAgainstTheBaseDir) {
  absl::StatusOr<ServeConfig> c = ParseServeConfig(R"(
model:
  dir: models/m
  name: m1
  backend: cuda
  head: "yes_no:4,5"
  query_template: "Q: {query}"
  threads: 3
  prefix_cache_mb: 0
server:
  listen: 0.0.0.0:1234
  metrics_listen: ""
  queue_size: 9
  drain_timeout_s: 1.5
limits:
  max_items: 10
  max_message_bytes: 1000
  max_item_bytes: 5000
  truncate: end
workers:
  count: 0
  gpus: [1, 3]
  workers_per_gpu: 2
  cpu_affinity: [[0, 1], [2]]
  ping_timeout_s: 0.5
  socket_dir: /run/rankd
logging:
  format: json
  access_log: true
)",
                                                   "/etc/rankd", "test.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.engine.model_dir, "/etc/rankd/models/m");
  EXPECT_EQ(c->model.name, "m1");
  EXPECT_EQ(c->model.engine.backend.kind, "cuda");
  EXPECT_EQ(c->model.engine.settings.head, "yes_no:4,5");
  EXPECT_EQ(c->model.engine.settings.query_template, "Q: {query}");
  EXPECT_FALSE(c->model.engine.settings.item_template.has_value());
  EXPECT_EQ(c->model.engine.backend.threads, 3);
  EXPECT_EQ(c->model.engine.prefix_cache_bytes, 0u);
  EXPECT_EQ(c->server.listen, "0.0.0.0:1234");
  EXPECT_EQ(c->server.metrics_listen, "");
  EXPECT_EQ(c->server.queue_size, 9);
  EXPECT_DOUBLE_EQ(c->server.drain_timeout_s, 1.5);
  EXPECT_EQ(c->limits.max_items, 10);
  EXPECT_EQ(c->limits.max_message_bytes, 1000);
  EXPECT_EQ(c->limits.max_item_tokens, 512);  // default kept
  EXPECT_EQ(c->limits.ItemByteLimit(), 5000);
  EXPECT_EQ(c->limits.max_query_bytes, 0);  // derived: 32 bytes per token
  EXPECT_EQ(c->limits.QueryByteLimit(), 32 * 512);
  EXPECT_EQ(c->limits.truncate, Limits::Truncate::kEnd);
  EXPECT_EQ(c->workers.count, 0);
  EXPECT_FALSE(c->workers.all_gpus);
  EXPECT_EQ(c->workers.gpus, (std::vector<int>{1, 3}));
  EXPECT_EQ(c->workers.cpu_affinity, "explicit");
  EXPECT_EQ(c->workers.cpu_sets, (std::vector<std::vector<int>>{{0, 1}, {2}}));
  EXPECT_EQ(c->workers.socket_dir, "/run/rankd");
  EXPECT_EQ(c->logging.format, "json");
  EXPECT_TRUE(c->logging.access_log);
  EXPECT_TRUE(FinalizeServeConfig(&*c).ok());
}

// Found by fuzz_serve_config: an absolute path not in normal form ("/.") was kept as written but
// written back normalised ("/"), so the workers' config differed from the front end's.
TEST(ServeConfigTest, AbsolutePathsAreReadInTheFormTheyAreWrittenIn) {
  absl::StatusOr<ServeConfig> c =
      ParseServeConfig("model:\n  dir: /.\n  backend: \n  #d\n", "/fuzz", "fuzz.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.engine.model_dir, "/");
  ASSERT_TRUE(FinalizeServeConfig(&*c).ok());
  const std::string yaml = ServeConfigToYaml(*c);
  absl::StatusOr<ServeConfig> back = ParseServeConfig(yaml, "/", "back.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_TRUE(*back == *c) << yaml;
  c = ParseServeConfig("model:\n  dir: /models/./a//b/../m\n", "/fuzz", "fuzz.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.engine.model_dir, "/models/a/m");
}

// The workers start from ServeConfigToYaml of the front end's config: every setting must come
// back equal, awkward strings and doubles included.
TEST(ServeConfigTest, YamlRoundTripsEverySetting) {
  ServeConfig defaults;
  defaults.model.engine.model_dir = "/models/m";
  absl::StatusOr<ServeConfig> back = ParseServeConfig(ServeConfigToYaml(defaults), "/", "yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << ServeConfigToYaml(defaults);
  EXPECT_TRUE(*back == defaults) << ServeConfigToYaml(defaults);

  ServeConfig c;
  engine::EngineOptions& e = c.model.engine;
  e.model_dir = "/models/qwen3 reranker";
  e.backend.kind = "cuda";
  e.backend.threads = 7;
  e.backend.strategy = "multi-item";
  e.backend.cuda_graphs = false;
  e.backend.precision = "fp8";
  e.backend.max_batch_tokens = 12345;
  e.tokenizer_threads = 3;
  e.prefix_cache_bytes = size_t{48} << 20;
  e.settings.head = "yes_no:yes,no";
  e.settings.query_template = "<|im_start|>system\nJudge: \"yes\" or 'no' \u00e9\u4e2d: {query}\n";
  e.settings.item_template = "  {item}\t# not a comment";
  e.settings.preset = "qwen3-reranker";
  e.settings.instruction = "- a: b [c] {d}";
  c.model.name = "true";  // a string that YAML would read as a bool when written bare
  c.server.listen = "[::1]:0";
  c.server.metrics_listen = "";
  c.server.drain_timeout_s = 0.1;
  c.server.initial_seconds_per_item = 1.0 / 3;
  c.server.tls = {.cert_file = "/etc/rankd/cert.pem",
                  .key_file = "/etc/rankd/key.pem",
                  .client_ca_file = "/etc/rankd/ca.pem",
                  .refresh_interval_s = 5};
  c.server.auth = {.api_keys_file = "/etc/rankd/keys", .protect_metrics = true};
  c.server.reflection = false;
  c.server.served_model_names = {"rerank-v3.5", "yes", "caf\u00e9 \"x\""};
  c.server.strict_model_name = true;
  c.server.cors_allow_origins = {"https://app.example.com", "*"};
  c.limits.max_items = 3;
  c.limits.max_request_tokens = int64_t{1} << 40;
  c.limits.max_id_bytes = 300;
  c.limits.max_answer_bytes = int64_t{5} << 30;
  c.server.max_buffered_answer_bytes = int64_t{6} << 30;
  c.limits.truncate = Limits::Truncate::kEnd;
  c.workers.count = 0;
  c.workers.all_gpus = true;
  c.workers.cpu_affinity = "explicit";
  c.workers.cpu_sets = {{0, 1}, {}, {5}};
  c.workers.ping_timeout_s = 2.5e-3;
  c.workers.socket_dir = "/run/rankd";
  c.logging.level = "debug";
  c.logging.access_log = true;
  c.result_cache.capacity_mb = 3;
  c.result_cache.ttl_s = 1.5;
  c.depth_control = {.enabled = true,
                     .target_p99_s = 0.25,
                     .min_depth = 10,
                     .max_depth = 20,
                     .kp = 1.5,
                     .ki = 0.125,
                     .kd = 0,
                     .window_s = 30};
  c.shaping = {.batch_max_wait_s = 2.5, .busy_threshold = 0.75};
  const std::string yaml = ServeConfigToYaml(c);
  back = ParseServeConfig(yaml, "/elsewhere", "yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_TRUE(*back == c) << yaml;
  EXPECT_EQ(back->model.engine.settings.query_template, e.settings.query_template);
  EXPECT_DOUBLE_EQ(back->server.initial_seconds_per_item, 1.0 / 3);

  c.workers.all_gpus = false;
  c.workers.gpus = {2, 0};
  c.workers.cpu_affinity = "auto";
  c.workers.cpu_sets.clear();
  e.settings.head.reset();
  c.server.reflection = true;
  back = ParseServeConfig(ServeConfigToYaml(c), "/", "yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == c) << ServeConfigToYaml(c);
}

// A relative model directory (from --model) is written absolute: the workers read the file from
// the socket directory, not from where the front end was started.
TEST(ServeConfigTest, YamlWritesPathsAbsolute) {
  ServeConfig c;
  c.model.engine.model_dir = "rel/model";
  absl::StatusOr<ServeConfig> back = ParseServeConfig(ServeConfigToYaml(c), "/x", "yaml");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->model.engine.model_dir,
            (std::filesystem::current_path() / "rel/model").lexically_normal().string());
}

TEST(ServeConfigTest, ErrorsNameTheKey) {
  auto error = [](const std::string& yaml) {
    absl::StatusOr<ServeConfig> c = ParseServeConfig(yaml, "/", "f.yaml");
    if (c.ok()) {
      absl::Status s = FinalizeServeConfig(&*c);
      return s.ok() ? std::string("ok") : std::string(s.message());
    }
    return std::string(c.status().message());
  };
  EXPECT_THAT(error("workers:\n  cuont: 2\n"), HasSubstr("f.yaml: workers.cuont: unknown setting"));
  EXPECT_THAT(error("workers:\n  cuont: 2\n"), HasSubstr("count"));  // lists the known keys
  EXPECT_THAT(error("workres: {}\n"), HasSubstr("workres: unknown setting"));
  EXPECT_THAT(error("model:\n  dir: /m\ndepth_control:\n  min_depth: 100\n  max_depth: 60\n"),
              HasSubstr("depth_control.max_depth: must be at least min_depth=100 (got 60)"));
  // Found by fuzz/fuzz_serve_config: a string that is not UTF-8 did not read back the same from
  // the YAML the workers get.
  EXPECT_THAT(error("model:\n  dir: \"/m\xbf\xbfx\"\n"),
              HasSubstr("model.dir: must be valid UTF-8 (byte 2 is not)"));
  EXPECT_THAT(error("workers:\n  [a, b]: 2\n"), HasSubstr("workers: keys must be plain names"));
  EXPECT_THAT(error("{x: 1}: 2\n"), HasSubstr("(top level): keys must be plain names"));
  EXPECT_THAT(error("model:\n  dir: /m\nshaping:\n  busy_threshold: 0\n"),
              HasSubstr("shaping.busy_threshold: must be in (0, 1] (got 0)"));
  EXPECT_THAT(error("model:\n  dir: /m\nshaping:\n  batch_max_wait_s: -1\n"),
              HasSubstr("shaping.batch_max_wait_s: must be in (0, 10000000] (got -1)"));
  EXPECT_THAT(error("model:\n  dir: /m\nresult_cache:\n  ttl_s: 0\n"),
              HasSubstr("result_cache.ttl_s: must be in (0, 10000000] (got 0)"));
  EXPECT_THAT(error("model:\n  dir: /m\n  prefix_cache_mb: -1\n"),
              HasSubstr("model.prefix_cache_mb: must be in [0, 1073741824] (got -1)"));
  EXPECT_THAT(error("workers:\n  count: two\n"), HasSubstr("workers.count: must be an integer"));
  EXPECT_THAT(error("workers:\n  count: 1.5\n"), HasSubstr("workers.count"));
  EXPECT_THAT(error("workers: 3\n"), HasSubstr("workers: must be a mapping"));
  EXPECT_THAT(error("workers:\n  gpus: some\n"), HasSubstr("workers.gpus"));
  EXPECT_THAT(error("workers:\n  cpu_affinity: fast\n"), HasSubstr("workers.cpu_affinity"));
  EXPECT_THAT(error("workers:\n  gpus: [0, x]\n"), HasSubstr("workers.gpus[1]"));
  EXPECT_THAT(error("model:\n  dir: /m\n  backend: tpu\n"), HasSubstr("model.backend"));
  EXPECT_THAT(error("model:\n  dir: /m\n  query_template: Q\n"),
              HasSubstr("model.query_template: must contain {query}"));
  EXPECT_THAT(error("model:\n  dir: /m\nlimits:\n  max_items: 0\n"),
              HasSubstr("limits.max_items: must be in [1, 1048576] (got 0)"));
  EXPECT_THAT(error("model:\n  dir: /m\nlimits:\n  max_item_bytes: -1\n"),
              HasSubstr("limits.max_item_bytes: must be in [0, 536870912] (got -1)"));
  EXPECT_THAT(error("model:\n  dir: /m\nlimits:\n  max_query_bytes: -2\n"),
              HasSubstr("limits.max_query_bytes: must be in [0, 536870912] (got -2)"));
  EXPECT_THAT(error("model:\n  dir: /m\nlimits:\n  truncate: start\n"),
              HasSubstr("limits.truncate: must be none or end (got 'start')"));
  EXPECT_THAT(error("model:\n  dir: /m\nlimits:\n  truncate: [end]\n"),
              HasSubstr("limits.truncate: must be none or end"));
  EXPECT_THAT(error("model:\n  dir: /m\nworkers:\n  ping_timeout_s: -1\n"),
              HasSubstr("workers.ping_timeout_s"));
  EXPECT_THAT(error("model:\n  dir: /m\nlogging:\n  format: xml\n"), HasSubstr("logging.format"));
  EXPECT_THAT(error("server: {}\n"), HasSubstr("model.dir: is required"));
  EXPECT_THAT(error("model:\n  dir: /m\nserver:\n  tls:\n    cert_file: c.pem\n"),
              HasSubstr("server.tls.key_file: is required with server.tls.cert_file"));
  EXPECT_THAT(error("model:\n  dir: /m\nserver:\n  tls:\n    key_file: k.pem\n"),
              HasSubstr("server.tls.cert_file: is required with server.tls.key_file"));
  EXPECT_THAT(error("model:\n  dir: /m\nserver:\n  tls:\n    client_ca_file: ca.pem\n"),
              HasSubstr("server.tls.client_ca_file: needs server.tls.cert_file"));
  EXPECT_THAT(error("model:\n  dir: /m\nserver:\n  tls:\n    refresh_interval_s: 0\n"),
              HasSubstr("server.tls.refresh_interval_s: must be in [1, 10000000] (got 0)"));
  EXPECT_THAT(error("model:\n  dir: /m\nserver:\n  auth:\n    protect_metrics: true\n"),
              HasSubstr("server.auth.protect_metrics: needs server.auth.api_keys_file"));
  EXPECT_THAT(error("model:\n  dir: /m\nserver:\n  reflection: maybe\n"),
              HasSubstr("server.reflection: must be true or false"));
  EXPECT_THAT(error("model:\n  dir: /m\n  backend: cuda\n  precision: fp16\n"),
              HasSubstr("model.precision: must be bf16 or fp8 (got 'fp16')"));
  EXPECT_THAT(error("model:\n  dir: /m\n  precision: fp8\n"),
              HasSubstr("model.precision: fp8 needs model.backend cuda"));
  EXPECT_THAT(error("model:\n  dir: /m\nlimits:\n  max_id_bytes: 100\n"),
              HasSubstr("limits.max_id_bytes: must be in [128, 536870912] (got 100)"));
  EXPECT_THAT(error("model:\n  dir: /m\nlimits:\n  max_answer_bytes: 1000\n"),
              HasSubstr("limits.max_answer_bytes: must be in [1024, 1099511627776] (got 1000)"));
  EXPECT_THAT(error("model:\n  dir: /m\nlimits:\n  max_answer_bytes: 2048\nserver:\n"
                    "  max_buffered_answer_bytes: 2047\n"),
              HasSubstr("server.max_buffered_answer_bytes: must be at least "
                        "limits.max_answer_bytes=2048 (got 2047)"));
  EXPECT_THAT(error("model: [unclosed\n"), HasSubstr("f.yaml"));
  EXPECT_EQ(error("model:\n  dir: /models/x/\n"), "ok");
}

// Issue 24, item 7: settings that cannot work were taken (an HTTP port that closed every
// connection unanswered, HTTP calls that all got 504 from an overflowing deadline, a cache that
// never hit, a server never ready). Each key's range is in the key table; what the file may not
// say a flag may not either (the check runs on the final config).
TEST(ServeConfigTest, SettingsThatCannotWorkAreRefusedNamingTheKeyTheRangeAndTheValue) {
  auto error = [](const std::string& section) {
    absl::StatusOr<ServeConfig> c = ParseServeConfig("model:\n  dir: /m\n" + section, "/", "f");
    if (!c.ok()) return std::string(c.status().message());
    absl::Status s = FinalizeServeConfig(&*c);
    return s.ok() ? std::string("ok") : std::string(s.message());
  };
  EXPECT_THAT(error("server:\n  http_read_timeout_s: 0\n"),
              HasSubstr("server.http_read_timeout_s: must be in (0, 10000000] (got 0)"));
  EXPECT_THAT(error("server:\n  http_read_timeout_s: -5\n"),
              HasSubstr("server.http_read_timeout_s: must be in (0, 10000000] (got -5)"));
  EXPECT_THAT(error("server:\n  http_max_connections: 0\n"),
              HasSubstr("server.http_max_connections: must be in [1, 1048576] (got 0)"));
  EXPECT_THAT(
      error("server:\n  http_request_timeout_s: 1e10\n"),
      HasSubstr("server.http_request_timeout_s: must be in (0, 10000000] (got 10000000000)"));
  EXPECT_THAT(error("result_cache:\n  ttl_s: 1e12\n"),
              HasSubstr("result_cache.ttl_s: must be in (0, 10000000] (got 1000000000000)"));
  EXPECT_THAT(error("workers:\n  ping_interval_s: .nan\n"),
              HasSubstr("workers.ping_interval_s: must be in (0, 10000000] (got nan)"));
  EXPECT_THAT(error("server:\n  drain_timeout_s: .inf\n"),
              HasSubstr("server.drain_timeout_s: must be in [0, 10000000] (got inf)"));
  EXPECT_THAT(error("logging:\n  level: verbose\n"),
              HasSubstr("logging.level: must be trace, debug, info, warn, error or off (got "
                        "'verbose')"));
  EXPECT_THAT(error("workers:\n  gpus: [0, -1]\n"),
              HasSubstr("workers.gpus[1]: must be in [0, 1023] (got -1)"));
  EXPECT_EQ(error("server:\n  http_request_timeout_s: 1e7\nresult_cache:\n  ttl_s: 86400\n"), "ok");

  // A flag sets the field after the file was read: the same check holds it.
  absl::StatusOr<ServeConfig> c = ParseServeConfig("model:\n  dir: /m\n", "/", "f");
  ASSERT_TRUE(c.ok()) << c.status();
  c->model.engine.backend.threads = -1;  // --threads -1
  EXPECT_EQ(FinalizeServeConfig(&*c).message(), "model.threads: must be in [0, 1024] (got -1)");
}

// min_ready above the workers there will be: never ready. PlanWorkers knows the count
// (workers.count, or one per GPU), so the rule is held there.
TEST(ServeConfigTest, MinReadyAboveTheWorkerCountIsRefused) {
  WorkersSection w;
  w.count = 2;
  w.min_ready = 3;
  absl::StatusOr<std::vector<WorkerSpec>> specs = PlanWorkers(w, false, 0, {0, 1});
  EXPECT_THAT(std::string(specs.status().message()),
              HasSubstr("workers.min_ready: 3 exceeds the 2 workers planned (workers.count=2)"));
  w.count = 0;  // one per GPU: 2 GPUs
  EXPECT_FALSE(PlanWorkers(w, true, 2, {0}).ok());
  w.min_ready = 2;
  EXPECT_TRUE(PlanWorkers(w, true, 2, {0}).ok());
}

// yaml-cpp reads a key given twice as two pairs of one mapping, and the last won: now an error
// naming both lines.
TEST(ServeConfigTest, AKeyGivenTwiceIsAnErrorNamingBothLines) {
  absl::StatusOr<ServeConfig> c = ParseServeConfig(
      "model:\n  dir: /m\nserver:\n  listen: 127.0.0.1:1\n  queue_size: 3\n"
      "  listen: 0.0.0.0:1\n",
      "/", "f.yaml");
  EXPECT_EQ(c.status().message(), "f.yaml: server.listen: given twice (lines 4 and 6)");
  c = ParseServeConfig("model:\n  dir: /m\nworkers: {count: 1}\nmodel:\n  dir: /n\n", "/", "f");
  EXPECT_EQ(c.status().message(), "f: model: given twice (lines 1 and 4)");
  // The same name in two sections is two keys.
  c = ParseServeConfig("model:\n  dir: /m\n  threads: 1\nworkers:\n  count: 1\n", "/", "f");
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(ServeConfigTest, PrecisionDefaultsToBf16AndTakesFp8WithCuda) {
  absl::StatusOr<ServeConfig> c = ParseServeConfig("model:\n  dir: /m\n", "/", "t");
  ASSERT_TRUE(c.ok() && FinalizeServeConfig(&*c).ok());
  EXPECT_EQ(c->model.engine.backend.precision, "bf16");
  c = ParseServeConfig("model:\n  dir: /m\n  backend: cuda\n  precision: fp8\n", "/", "t");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(FinalizeServeConfig(&*c).ok());
  EXPECT_EQ(c->model.engine.backend.precision, "fp8");
}

TEST(ServeConfigTest, ReflectionDefaultsToOnForLoopbackOnly) {
  for (const auto& [listen, on] :
       std::vector<std::pair<std::string, bool>>{{"127.0.0.1:50051", true},
                                                 {"localhost:0", true},
                                                 {"[::1]:50051", true},
                                                 {"unix:/run/rankd.sock", true},
                                                 {"0.0.0.0:50051", false},
                                                 {"[::]:50051", false},
                                                 {":50051", false},
                                                 {"10.1.2.3:50051", false}}) {
    ServeConfig c;
    c.model.engine.model_dir = "/m";
    c.server.listen = listen;
    ASSERT_TRUE(FinalizeServeConfig(&c).ok());
    EXPECT_EQ(c.server.reflection, on) << listen;
    c.server.reflection = !on;  // a setting wins
    ASSERT_TRUE(FinalizeServeConfig(&c).ok());
    EXPECT_EQ(c.server.reflection, !on) << listen;
  }
}

TEST(ServeConfigTest, ModelNameDefaultsToTheDirectoryName) {
  ServeConfig c;
  c.model.engine.model_dir = "/models/qwen3-reranker/";
  ASSERT_TRUE(FinalizeServeConfig(&c).ok());
  EXPECT_EQ(c.model.name, "qwen3-reranker");
  // The served names default to it; strict names and CORS are off.
  EXPECT_EQ(c.server.served_model_names, std::vector<std::string>{"qwen3-reranker"});
  EXPECT_FALSE(c.server.strict_model_name);
  EXPECT_TRUE(c.server.cors_allow_origins.empty());
}

TEST(ServeConfigTest, ServedModelNamesAndCorsOriginsAreChecked) {
  auto error = [](const std::string& section) {
    absl::StatusOr<ServeConfig> c = ParseServeConfig("model:\n  dir: /m\n" + section, "/", "f");
    if (!c.ok()) return std::string(c.status().message());
    absl::Status s = FinalizeServeConfig(&*c);
    return s.ok() ? std::string("ok") : std::string(s.message());
  };
  EXPECT_EQ(
      error("server:\n  served_model_names: [rerank-v3.5, m]\n  strict_model_name: true\n"
            "  cors_allow_origins: ['http://localhost:3000', 'https://a.example.com', '*']\n"),
      "ok");
  EXPECT_THAT(error("server:\n  served_model_names: rerank\n"),
              HasSubstr("server.served_model_names: must be a list of strings"));
  EXPECT_THAT(error("server:\n  served_model_names: [a, '']\n"),
              HasSubstr("server.served_model_names[1]: must be 1 to 256 bytes (got 0)"));
  EXPECT_THAT(error("server:\n  served_model_names: [\"a\\tb\"]\n"),
              HasSubstr("server.served_model_names[0]: must not contain control characters"));
  EXPECT_THAT(error(absl::StrCat("server:\n  served_model_names: [", std::string(257, 'x'), "]\n")),
              HasSubstr("server.served_model_names[0]: must be 1 to 256 bytes (got 257)"));
  std::string many = "server:\n  served_model_names: [";
  for (int i = 0; i < 17; ++i) absl::StrAppend(&many, i == 0 ? "" : ", ", "m", i);
  EXPECT_THAT(error(many + "]\n"),
              HasSubstr("server.served_model_names: at most 16 entries (got 17)"));
  for (const char* bad : {"app.example.com", "https://", "https://a.example.com/", "ftp://a",
                          "https://a.example.com, https://b", "null", "https://a b"}) {
    EXPECT_THAT(error(absl::StrCat("server:\n  cors_allow_origins: ['", bad, "']\n")),
                HasSubstr("server.cors_allow_origins[0]: must be \"*\" or an origin"))
        << bad;
  }
  EXPECT_THAT(error("server:\n  strict_model_name: maybe\n"),
              HasSubstr("server.strict_model_name: must be true or false"));
}

TEST(ServeConfigTest, LoadsAFileRelativeToItsDirectory) {
  const std::string dir = ::testing::TempDir() + "/rankd_config_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/c.yaml");
    out << "model:\n  dir: ../m\n";
  }
  absl::StatusOr<ServeConfig> c = LoadServeConfigFile(dir + "/c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.engine.model_dir,
            (std::filesystem::absolute(dir) / "../m").lexically_normal().string());
  EXPECT_EQ(LoadServeConfigFile(dir + "/missing.yaml").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace rankd::server
