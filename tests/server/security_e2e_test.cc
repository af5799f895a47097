// End-to-end tests of rankd serve's security settings (server.tls, server.auth,
// server.reflection): a real server process on the tiny model, certificates made at test time
// with Debian's openssl CLI in a temporary directory. Timeouts are liveness bounds only.
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/common/golden.h"
#include "tests/server/test_server.h"

namespace rankd::testing {
namespace {

using grpc::StatusCode;
using ::testing::HasSubstr;
using ::testing::Not;
using HealthStatus = grpc::health::v1::HealthCheckResponse;
using std::chrono::seconds;

constexpr auto kLiveness = seconds(60);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A temporary directory with a CA and certificates made by the openssl CLI.
class Pki {
 public:
  Pki() {
    char dir[] = "/tmp/rankd-pki-XXXXXX";
    dir_ = mkdtemp(dir) != nullptr ? dir : "";
  }
  ~Pki() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return absl::StrCat(dir_, "/", name); }

  // NAME.pem (self-signed CA certificate) and NAME.key.
  bool MakeCa(const std::string& name) {
    return Openssl(
        absl::StrCat("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                     "-nodes -days 2 -subj /CN=",
                     name, " -keyout ", Path(name + ".key"), " -out ", Path(name + ".pem")));
  }
  // NAME.pem and NAME.key, signed by CA, valid for 127.0.0.1 (server and client use).
  bool MakeCert(const std::string& name, const std::string& ca) {
    std::ofstream(Path(name + ".ext")) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                          "extendedKeyUsage=serverAuth,clientAuth\n";
    return Openssl(absl::StrCat("req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                                "-nodes -subj /CN=",
                                name, " -keyout ", Path(name + ".key"), " -out ",
                                Path(name + ".csr"))) &&
           Openssl(absl::StrCat("x509 -req -days 2 -in ", Path(name + ".csr"), " -CA ",
                                Path(ca + ".pem"), " -CAkey ", Path(ca + ".key"),
                                " -CAcreateserial -extfile ", Path(name + ".ext"), " -out ",
                                Path(name + ".pem")));
  }
  std::string Pem(const std::string& file) const { return ReadFile(Path(file)); }

 private:
  bool Openssl(const std::string& args) const {
    const std::string command = absl::StrCat("openssl ", args, " >>", Path("openssl.log"), " 2>&1");
    const bool ok = std::system(command.c_str()) == 0;
    if (!ok) ADD_FAILURE() << command << "\n" << ReadFile(Path("openssl.log"));
    return ok;
  }
  std::string dir_;
};

bool HaveOpenssl() { return std::system("openssl version >/dev/null 2>&1") == 0; }

std::string Config(const std::string& server_settings) {
  return absl::StrCat("model:\n  dir: ", ModelDir("llama-cls"),
                      "\n  threads: 1\n"
                      "server:\n",
                      server_settings,
                      "workers:\n"
                      "  count: 1\n");
}

// A channel of its own (no subchannel shared with other channels): a new connection, a new
// handshake.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& target,
                                          std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, creds, args);
}

std::shared_ptr<grpc::ChannelCredentials> Tls(const Pki& pki, const std::string& ca,
                                              const std::string& client = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = pki.Pem(ca + ".pem");
  if (!client.empty()) {
    o.pem_cert_chain = pki.Pem(client + ".pem");
    o.pem_private_key = pki.Pem(client + ".key");
  }
  return grpc::SslCredentials(o);
}

grpc::Status Check(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                   HealthStatus* response) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  return stub->Check(&context, request, response);
}

// Polls until rankd.v1.Scorer is SERVING over `channel`.
bool WaitServing(const std::shared_ptr<grpc::Channel>& channel) {
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (std::chrono::steady_clock::now() < deadline) {
    HealthStatus r;
    if (Check(channel, "rankd.v1.Scorer", &r).ok() && r.status() == HealthStatus::SERVING) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Polls the server's log for `text`.
bool WaitForLog(const TestServer& server, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (server.Log().find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// One Score call of two text items; `api_key` empty: no authorization metadata.
grpc::Status Score(const std::shared_ptr<grpc::Channel>& channel, const std::string& api_key,
                   rankd::v1::ScoreResponse* response = nullptr) {
  rankd::v1::ScoreRequest request;
  request.set_query("rust engineer");
  request.add_items()->set_text("Rust developer, Berlin");
  request.add_items()->set_text("Barista, Lisbon");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kLiveness);
  if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
  rankd::v1::ScoreResponse unused;
  return rankd::v1::Scorer::NewStub(channel)->Score(&context, request,
                                                    response != nullptr ? response : &unused);
}

// The first answer of a reflection stream (list_services), or its error.
grpc::Status ListServices(const std::shared_ptr<grpc::Channel>& channel,
                          const std::string& api_key) {
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(30));
  if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
  auto stream = stub->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("");
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  if (stream->Write(request) && stream->Read(&response)) {
    stream->WritesDone();
  }
  return stream->Finish();
}

TEST(SecurityTest, ApiKeysGuardEveryServiceButHealthAndAreReloadedOnSighup) {
  Pki pki;
  const std::string keys = pki.Path("keys.txt");
  std::ofstream(keys) << "# rankd keys\n\n  first-key-1234567  \nsecond-key-4567890\n";
  auto server = TestServer::Start(
      Config(absl::StrCat("  auth:\n    api_keys_file: ", keys, "\n    protect_metrics: true\n")));
  ASSERT_NE(server, nullptr);
  // Health needs no key: probes reach it.
  ASSERT_TRUE(WaitServing(server->channel()));

  grpc::Status s = Score(server->channel(), "");
  EXPECT_EQ(s.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("authorization: Bearer KEY"));
  EXPECT_EQ(Score(server->channel(), "wrong-key").error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Score(server->channel(), "first-key-123456").error_code(), StatusCode::UNAUTHENTICATED);
  rankd::v1::ScoreResponse response;
  s = Score(server->channel(), "second-key-4567890", &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.scores_size(), 2);
  EXPECT_TRUE(Score(server->channel(), "first-key-1234567").ok());
  // Reflection (on: loopback) is behind the keys too.
  EXPECT_EQ(ListServices(server->channel(), "").error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(ListServices(server->channel(), "first-key-1234567").ok());

  // /metrics takes the same keys; /healthz and /readyz stay open.
  httplib::Client http("127.0.0.1", server->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = http.Get("/metrics", {{"Authorization", "Bearer wrong"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = http.Get("/metrics", {{"Authorization", "Bearer second-key-4567890"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("rankd_requests_total"));
  res = http.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = http.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);

  // SIGHUP re-reads the file: the new key is accepted, a removed one no longer.
  std::ofstream(keys + ".new") << "third-key-7890123\n";
  std::filesystem::rename(keys + ".new", keys);
  server->Signal(SIGHUP);
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  while (!Score(server->channel(), "third-key-7890123").ok() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(Score(server->channel(), "third-key-7890123").ok());
  EXPECT_EQ(Score(server->channel(), "first-key-1234567").error_code(),
            StatusCode::UNAUTHENTICATED);
  // A reload that fails keeps the keys in use.
  std::filesystem::remove(keys);
  server->Signal(SIGHUP);
  EXPECT_TRUE(WaitForLog(*server, "SIGHUP: keeping the API keys in use"));
  EXPECT_TRUE(Score(server->channel(), "third-key-7890123").ok());
  EXPECT_EQ(server->Health(""), HealthStatus::SERVING);

  // No key reaches the log.
  const std::string log = server->Log();
  for (const char* key :
       {"first-key-1234567", "second-key-4567890", "third-key-7890123", "wrong-key"}) {
    EXPECT_THAT(log, Not(HasSubstr(key)));
  }
}

std::string TlsSettings(const Pki& pki, const std::string& cert, const std::string& client_ca = "",
                        int refresh_interval_s = 60) {
  std::string s = absl::StrCat("  tls:\n    cert_file: ", pki.Path(cert + ".pem"),
                               "\n    key_file: ", pki.Path(cert + ".key"),
                               "\n    refresh_interval_s: ", refresh_interval_s, "\n");
  if (!client_ca.empty()) {
    absl::StrAppend(&s, "    client_ca_file: ", pki.Path(client_ca + ".pem"), "\n");
  }
  return s;
}

TEST(SecurityTest, TlsServesTlsClientsAndRefusesPlaintext) {
  ASSERT_TRUE(HaveOpenssl()) << "the openssl CLI is needed (scripts/install-deps.sh)";
  Pki pki;
  ASSERT_TRUE(pki.MakeCa("ca") && pki.MakeCert("server", "ca") && pki.MakeCa("other-ca"));
  auto server = TestServer::Start(Config(TlsSettings(pki, "server")));
  ASSERT_NE(server, nullptr);
  auto tls = NewChannel(server->target(), Tls(pki, "ca"));
  ASSERT_TRUE(WaitServing(tls)) << server->Log();
  rankd::v1::ScoreResponse response;
  grpc::Status s = Score(tls, "", &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.scores_size(), 2);

  HealthStatus health;
  EXPECT_EQ(Check(NewChannel(server->target(), grpc::InsecureChannelCredentials()), "", &health)
                .error_code(),
            StatusCode::UNAVAILABLE);
  // A client that does not trust the server's CA does not get through either.
  EXPECT_EQ(Check(NewChannel(server->target(), Tls(pki, "other-ca")), "", &health).error_code(),
            StatusCode::UNAVAILABLE);
}

// The listener watchdog (issue 24, item 4) probes a TLS port quietly (a probe that sent bytes
// made the server log a failed handshake a second), and its probes pass: a watchdog that failed
// them would stop the server within 3 x (1 s + 3 s), mutual TLS included.
TEST(SecurityTest, TheListenerWatchdogProbesTlsPortsQuietly) {
  ASSERT_TRUE(HaveOpenssl());
  Pki pki;
  ASSERT_TRUE(pki.MakeCa("ca") && pki.MakeCert("server", "ca") && pki.MakeCert("client", "ca"));
  auto server = TestServer::Start(Config(TlsSettings(pki, "server", "ca")));
  ASSERT_NE(server, nullptr);
  auto channel = NewChannel(server->target(), Tls(pki, "ca", "client"));
  ASSERT_TRUE(WaitServing(channel)) << server->Log();
  std::this_thread::sleep_for(seconds(14));  // past the time 3 failed probes take
  HealthStatus r;
  EXPECT_TRUE(Check(channel, "rankd.v1.Scorer", &r).ok());
  EXPECT_EQ(r.status(), HealthStatus::SERVING);
  EXPECT_THAT(server->Log(), Not(HasSubstr("Handshake failed")));
  EXPECT_THAT(server->Log(), Not(HasSubstr("accepts no connection")));
}

TEST(SecurityTest, MutualTlsServesOnlyClientsWithACertificateSignedByTheClientCa) {
  ASSERT_TRUE(HaveOpenssl());
  Pki pki;
  ASSERT_TRUE(pki.MakeCa("ca") && pki.MakeCert("server", "ca") && pki.MakeCa("client-ca") &&
              pki.MakeCert("client", "client-ca") && pki.MakeCa("rogue-ca") &&
              pki.MakeCert("rogue", "rogue-ca"));
  auto server = TestServer::Start(Config(TlsSettings(pki, "server", "client-ca")));
  ASSERT_NE(server, nullptr);
  auto good = NewChannel(server->target(), Tls(pki, "ca", "client"));
  ASSERT_TRUE(WaitServing(good)) << server->Log();
  EXPECT_TRUE(Score(good, "").ok());

  HealthStatus health;
  EXPECT_EQ(Check(NewChannel(server->target(), Tls(pki, "ca")), "", &health).error_code(),
            StatusCode::UNAVAILABLE);
  EXPECT_EQ(Check(NewChannel(server->target(), Tls(pki, "ca", "rogue")), "", &health).error_code(),
            StatusCode::UNAVAILABLE);
}

TEST(SecurityTest, ReplacedCertificatesReachNewConnectionsWhileOpenCallsGoOn) {
  ASSERT_TRUE(HaveOpenssl());
  Pki pki;
  ASSERT_TRUE(pki.MakeCa("ca") && pki.MakeCert("server", "ca") && pki.MakeCa("ca2") &&
              pki.MakeCert("server2", "ca2"));
  auto server = TestServer::Start(Config(TlsSettings(pki, "server", "", 1)));
  ASSERT_NE(server, nullptr);
  auto old_channel = NewChannel(server->target(), Tls(pki, "ca"));
  ASSERT_TRUE(WaitServing(old_channel)) << server->Log();

  // A call in flight across the change: a Watch stream of rankd.v1.Scorer.
  auto health = grpc::health::v1::Health::NewStub(old_channel);
  grpc::ClientContext watch_context;
  watch_context.set_deadline(std::chrono::system_clock::now() + 3 * kLiveness);
  grpc::health::v1::HealthCheckRequest watch_request;
  watch_request.set_service("rankd.v1.Scorer");
  auto watch = health->Watch(&watch_context, watch_request);
  HealthStatus update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthStatus::SERVING);

  // The new pair replaces the files (each by rename, as a secret mount updates them).
  for (const char* ext : {".key", ".pem"}) {
    std::filesystem::copy_file(pki.Path(std::string("server2") + ext),
                               pki.Path(std::string("server.tmp") + ext));
    std::filesystem::rename(pki.Path(std::string("server.tmp") + ext),
                            pki.Path(std::string("server") + ext));
  }
  // New connections get the new certificate within a refresh interval or so.
  const auto deadline = std::chrono::steady_clock::now() + kLiveness;
  HealthStatus r;
  while (!Check(NewChannel(server->target(), Tls(pki, "ca2")), "", &r).ok() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(Check(NewChannel(server->target(), Tls(pki, "ca2")), "", &r).ok());
  EXPECT_EQ(Check(NewChannel(server->target(), Tls(pki, "ca")), "", &r).error_code(),
            StatusCode::UNAVAILABLE);

  // The connection made before keeps serving, and the stream opened before is still open: it
  // sees the drain's NOT_SERVING.
  EXPECT_TRUE(Score(old_channel, "").ok());
  server->Signal(SIGTERM);
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthStatus::NOT_SERVING);
  watch_context.TryCancel();
  watch->Finish();
}

TEST(SecurityTest, ReflectionFollowsTheSetting) {
  auto server = TestServer::Start(Config("  reflection: false\n"));
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(WaitServing(server->channel()));
  EXPECT_EQ(ListServices(server->channel(), "").error_code(), StatusCode::UNIMPLEMENTED);
}

// Runs `command` (a shell line) and returns its exit status and output.
std::pair<int, std::string> RunShell(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(SecurityTest, ClientToolsReachATlsServerWithAKey) {
  ASSERT_TRUE(HaveOpenssl());
  Pki pki;
  ASSERT_TRUE(pki.MakeCa("ca") && pki.MakeCert("server", "ca"));
  std::ofstream(pki.Path("keys")) << "tool-key-0123456789\n";
  auto server = TestServer::Start(Config(absl::StrCat(
      TlsSettings(pki, "server"), "  auth:\n    api_keys_file: ", pki.Path("keys"), "\n")));
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(WaitServing(NewChannel(server->target(), Tls(pki, "ca")))) << server->Log();
  std::ofstream(pki.Path("request.jsonl")) << R"({"query": "q", "items": ["a", "b"]})"
                                           << "\n";
  const std::string bin = absl::StrCat(RANKD_BINARY_DIR, "/bin/");
  const std::string score =
      absl::StrCat(bin, "rankd-client score --target ", server->target(), " --tls-ca ",
                   pki.Path("ca.pem"), " --input ", pki.Path("request.jsonl"));

  auto [code, out] = RunShell(score + " --api-key tool-key-0123456789");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("\"scores\""));
  std::tie(code, out) = RunShell("RANKD_API_KEY=tool-key-0123456789 " + score);
  EXPECT_EQ(code, 0) << out;
  std::tie(code, out) = RunShell(score);
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("UNAUTHENTICATED"));
  std::tie(code, out) = RunShell(absl::StrCat(bin, "rankd-client health --target ",
                                              server->target(), " --tls-ca ", pki.Path("ca.pem")));
  EXPECT_EQ(code, 0) << out;  // health needs no key
}

// `rankd serve --config FILE` expected to fail at start: its exit status and output.
std::pair<int, std::string> ServeFails(const Pki& pki, const std::string& server_settings) {
  const std::string config = pki.Path("bad.yaml");
  std::ofstream(config) << Config(server_settings);
  return RunShell(absl::StrCat(RANKD_BINARY_DIR, "/bin/rankd serve --config ", config,
                               " --listen 127.0.0.1:0 --metrics-listen '' --http-listen ''"));
}

// Issue 24, item 9: the gRPC port and the HTTP API read `authorization` alike (one parser, RFC
// 6750): the scheme in any case, one value only (gRPC took the last of two, HTTP the first).
TEST(SecurityTest, BothTransportsReadTheAuthorizationAlike) {
  Pki pki;
  const std::string key = "a-key-of-the-right-length";
  const std::string keys = pki.Path("keys.txt");
  // A byte-order mark (as Windows editors write) before the only key: skipped, not part of it.
  std::ofstream(keys) << "\xEF\xBB\xBF" << key << "\r\n# rotated monthly\r\n";
  auto server = TestServer::Start(Config(absl::StrCat("  auth:\n    api_keys_file: ", keys, "\n")));
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(WaitServing(server->channel()));
  const std::string wrong = "Bearer another-key-of-the-length";
  struct Case {
    std::vector<std::string> values;  // the authorization values sent
    bool accepted;
  };
  const std::vector<Case> cases = {
      {{"Bearer " + key}, true},
      {{"bearer " + key}, true},
      {{"BEARER " + key}, true},
      {{"Bearer   " + key}, true},  // 1*SP
      {{"Bearer" + key}, false},
      {{"Basic " + key}, false},
      {{"Bearer " + key, wrong}, false},
      {{wrong, "Bearer " + key}, false},
      {{"Bearer " + key, "Bearer " + key}, false},
      {{wrong}, false},
      {{}, false},
  };
  httplib::Client http("127.0.0.1", server->http_port());
  const std::string body = R"({"query": "rust engineer", "documents": ["Rust developer"]})";
  int grpc_wrong = 0, http_wrong = 0;
  for (const Case& c : cases) {
    const std::string what = absl::StrCat("[", absl::StrJoin(c.values, "] ["), "]");
    rankd::v1::ScoreRequest request;
    request.set_query("rust engineer");
    request.add_items()->set_text("Rust developer, Berlin");
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kLiveness);
    for (const std::string& v : c.values) context.AddMetadata("authorization", v);
    rankd::v1::ScoreResponse response;
    const grpc::Status s =
        rankd::v1::Scorer::NewStub(server->channel())->Score(&context, request, &response);
    EXPECT_EQ(s.ok(), c.accepted) << "gRPC " << what << ": " << s.error_message();
    if (!s.ok()) {
      EXPECT_EQ(s.error_code(), StatusCode::UNAUTHENTICATED) << what;
    }
    grpc_wrong += s.ok() != c.accepted;

    httplib::Headers headers;
    for (const std::string& v : c.values) headers.emplace("Authorization", v);
    auto res = http.Post("/v1/rerank", headers, body, "application/json");
    ASSERT_TRUE(res) << what;
    EXPECT_EQ(res->status, c.accepted ? 200 : 401) << "HTTP " << what << ": " << res->body;
    http_wrong += (res->status == 200) != c.accepted;
  }
  EXPECT_EQ(grpc_wrong + http_wrong, 0)
      << "gRPC " << grpc_wrong << ", HTTP " << http_wrong << " of " << cases.size() << " cases";
  // A value ending in a blank: malformed in HTTP/2 (gRPC metadata), refused; HTTP/1.1 drops the
  // blanks around a header value before it is read (they are not part of it).
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer " + key + " ");
  rankd::v1::ScoreRequest request;
  request.set_query("q");
  request.add_items()->set_text("i");
  rankd::v1::ScoreResponse response;
  EXPECT_EQ(rankd::v1::Scorer::NewStub(server->channel())
                ->Score(&context, request, &response)
                .error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(server->Log(), Not(HasSubstr(key)));
}

// Lines of the keys file that are not keys stop the start, naming the line (never quoting it).
TEST(SecurityTest, OddLinesOfTheKeysFileStopTheStartNamingTheLine) {
  Pki pki;
  const std::string keys = pki.Path("keys.txt");
  const std::string settings = absl::StrCat("  auth:\n    api_keys_file: ", keys, "\n");
  std::ofstream(keys) << "# keys\nthe-first-key-in-the-file\nsecond-key-abcdefgh # ops team\n";
  auto [code, out] = ServeFails(pki, settings);
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("server.auth.api_keys_file " + keys + ": line 3 is not a key"));
  EXPECT_THAT(out, Not(HasSubstr("second-key")));
  std::ofstream(keys) << "the-first-key-in-the-file\nk\n";
  std::tie(code, out) = ServeFails(pki, settings);
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("line 2: a key of 1 characters; keys need at least 16"));
}

TEST(SecurityTest, BadSecurityFilesStopTheStartWithAnErrorNamingTheSetting) {
  ASSERT_TRUE(HaveOpenssl());
  Pki pki;
  ASSERT_TRUE(pki.MakeCa("ca") && pki.MakeCert("server", "ca") && pki.MakeCert("other", "ca"));
  const std::string missing = pki.Path("missing.pem");

  auto [code, out] = ServeFails(pki, absl::StrCat("  auth:\n    api_keys_file: ", missing, "\n"));
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("server.auth.api_keys_file " + missing + ": cannot open"));

  std::ofstream(pki.Path("empty-keys")) << "# only a comment\n\n";
  std::tie(code, out) =
      ServeFails(pki, absl::StrCat("  auth:\n    api_keys_file: ", pki.Path("empty-keys"), "\n"));
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("holds no key"));

  std::tie(code, out) =
      ServeFails(pki, absl::StrCat("  tls:\n    cert_file: ", missing,
                                   "\n    key_file: ", pki.Path("server.key"), "\n"));
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("server.tls.cert_file " + missing + ": cannot read"));

  std::tie(code, out) =
      ServeFails(pki, absl::StrCat("  tls:\n    cert_file: ", pki.Path("server.pem"),
                                   "\n    key_file: ", pki.Path("other.key"), "\n"));
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("server.tls.key_file " + pki.Path("other.key") +
                             ": does not match server.tls.cert_file"));

  std::tie(code, out) =
      ServeFails(pki, absl::StrCat("  tls:\n    cert_file: ", pki.Path("server.pem"),
                                   "\n    key_file: ", pki.Path("server.key"),
                                   "\n    client_ca_file: ", missing, "\n"));
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("server.tls.client_ca_file " + missing + ": cannot read"));

  std::tie(code, out) =
      ServeFails(pki, absl::StrCat("  tls:\n    cert_file: ", pki.Path("server.pem"), "\n"));
  EXPECT_EQ(code, 2);  // a config error, before anything starts
  EXPECT_THAT(out, HasSubstr("server.tls.key_file: is required with server.tls.cert_file"));
}

}  // namespace
}  // namespace rankd::testing
