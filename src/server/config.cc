#include "rankd/server/config.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rankd/common/status.h"
#include "rankd/common/utf8.h"
#include "yaml-cpp/yaml.h"

namespace rankd::server {

// Defined in the generated embedded_config.cc: configs/tiny-cpu.yaml and the folder its
// relative paths resolve against.
extern const char kEmbeddedConfigText[];
extern const char kEmbeddedConfigBaseDir[];

namespace {

namespace fs = std::filesystem;

absl::Status KeyError(const std::string& key, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", why));
}

// Converts a scalar with yaml-cpp, turning its exceptions into an error that names the key.
template <typename T>
absl::Status Scalar(const YAML::Node& node, const std::string& key, absl::string_view expected,
                    T* out) {
  if (!node.IsScalar()) return KeyError(key, absl::StrCat("must be ", expected));
  try {
    *out = node.as<T>();
  } catch (const YAML::Exception&) {
    return KeyError(key, absl::StrCat("must be ", expected, " (got '", node.Scalar(), "')"));
  }
  if constexpr (std::is_same_v<T, std::string>) {
    // The workers get the config as YAML text again, which must read back the same.
    if (const size_t bad = FindInvalidUtf8(*out); bad != absl::string_view::npos) {
      return KeyError(key, absl::StrCat("must be valid UTF-8 (byte ", bad, " is not)"));
    }
  }
  return absl::OkStatus();
}

absl::Status IntList(const YAML::Node& node, const std::string& key, std::vector<int>* out) {
  if (!node.IsSequence()) return KeyError(key, "must be a list of integers");
  out->clear();
  for (size_t i = 0; i < node.size(); ++i) {
    int v = 0;
    RANKD_RETURN_IF_ERROR(Scalar(node[i], absl::StrCat(key, "[", i, "]"), "an integer", &v));
    out->push_back(v);
  }
  return absl::OkStatus();
}

// One YAML mapping key: how to read it into its field, and how to write the field back (the
// parser and ServeConfigToYaml share one table, so a key is declared once).
struct Field {
  std::function<absl::Status(const YAML::Node&, const std::string& key)> read;
  std::function<void(YAML::Emitter&)> write;  // the value only (the key is the table's)
};
using Schema = std::map<std::string, Field>;

Field String(std::string* v) {
  return {[v](const YAML::Node& n, const std::string& k) { return Scalar(n, k, "a string", v); },
          [v](YAML::Emitter& e) { e << YAML::DoubleQuoted << *v; }};
}
// An empty string leaves the value unset (and an unset value is written as "").
Field OptString(std::optional<std::string>* v) {
  return {[v](const YAML::Node& n, const std::string& k) -> absl::Status {
            std::string s;
            RANKD_RETURN_IF_ERROR(Scalar(n, k, "a string", &s));
            if (s.empty()) {
              v->reset();
            } else {
              *v = std::move(s);
            }
            return absl::OkStatus();
          },
          [v](YAML::Emitter& e) { e << YAML::DoubleQuoted << v->value_or(""); }};
}
template <typename T>
Field Number(T* v) {
  return {[v](const YAML::Node& n, const std::string& k) {
            return Scalar(n, k, std::is_integral_v<T> ? "an integer" : "a number", v);
          },
          [v](YAML::Emitter& e) {
            if constexpr (std::is_integral_v<T>) {
              e << *v;
            } else {
              e << YAML::Precision(17) << *v;  // round-trips every double
            }
          }};
}
// A size given in MiB in the file, kept in bytes (whole MiB: what the file can say).
Field MebiBytes(size_t* bytes) {
  return {[bytes](const YAML::Node& n, const std::string& k) -> absl::Status {
            int64_t mb = 0;
            RANKD_RETURN_IF_ERROR(Scalar(n, k, "an integer (MiB)", &mb));
            if (mb < 0 || mb > (int64_t{1} << 30)) {
              return KeyError(k, absl::StrCat("must be between 0 and 2^30 MiB (got ", mb, ")"));
            }
            *bytes = static_cast<size_t>(mb) << 20;
            return absl::OkStatus();
          },
          [bytes](YAML::Emitter& e) { e << static_cast<int64_t>(*bytes >> 20); }};
}
Field Bool(bool* v) {
  return {
      [v](const YAML::Node& n, const std::string& k) { return Scalar(n, k, "true or false", v); },
      [v](YAML::Emitter& e) { e << YAML::TrueFalseBool << *v; }};
}
// Unset is written as null, which the parser reads back as unset.
Field OptBool(std::optional<bool>* v) {
  return {[v](const YAML::Node& n, const std::string& k) -> absl::Status {
            bool b = false;
            RANKD_RETURN_IF_ERROR(Scalar(n, k, "true or false", &b));
            *v = b;
            return absl::OkStatus();
          },
          [v](YAML::Emitter& e) {
            if (v->has_value()) {
              e << YAML::TrueFalseBool << **v;
            } else {
              e << YAML::Null;
            }
          }};
}
Field TruncateMode(Limits::Truncate* v) {
  return {[v](const YAML::Node& n, const std::string& k) -> absl::Status {
            std::string s;
            RANKD_RETURN_IF_ERROR(Scalar(n, k, "none or end", &s));
            if (s == "none") {
              *v = Limits::Truncate::kNone;
            } else if (s == "end") {
              *v = Limits::Truncate::kEnd;
            } else {
              return KeyError(k, absl::StrCat("must be none or end (got '", s, "')"));
            }
            return absl::OkStatus();
          },
          [v](YAML::Emitter& e) { e << (*v == Limits::Truncate::kEnd ? "end" : "none"); }};
}
// Relative paths resolve against `base_dir` when read; every path is read in its lexically normal
// form ("/a/./b" is "/a/b"), the form it is written in, so that it reads back the same.
Field Path(std::string* v, const std::string& base_dir) {
  return {[v, base_dir](const YAML::Node& n, const std::string& k) -> absl::Status {
            RANKD_RETURN_IF_ERROR(Scalar(n, k, "a path", v));
            if (!v->empty()) {
              const fs::path p(*v);
              *v = (p.is_relative() ? fs::path(base_dir) / p : p).lexically_normal().string();
            }
            return absl::OkStatus();
          },
          [v](YAML::Emitter& e) {
            e << YAML::DoubleQuoted
              << (v->empty() ? *v : fs::absolute(fs::path(*v)).lexically_normal().string());
          }};
}

absl::Status ReadMap(const YAML::Node& node, const std::string& prefix, const Schema& schema) {
  if (!node.IsMap()) return KeyError(prefix, "must be a mapping");
  for (const auto& kv : node) {
    // Found by fuzz/fuzz_serve_config: a key that is a list or a mapping threw out of the parser.
    if (!kv.first.IsScalar()) {
      return KeyError(prefix.empty() ? "(top level)" : prefix, "keys must be plain names");
    }
    const std::string name = kv.first.Scalar();
    const std::string key = prefix.empty() ? name : absl::StrCat(prefix, ".", name);
    auto it = schema.find(name);
    if (it == schema.end()) {
      std::vector<std::string> known;
      for (const auto& [k, unused] : schema) known.push_back(k);
      return KeyError(key,
                      absl::StrCat("unknown setting (known: ", absl::StrJoin(known, ", "), ")"));
    }
    if (kv.second.IsNull()) continue;  // `key:` with no value keeps the default
    RANKD_RETURN_IF_ERROR(it->second.read(kv.second, key));
  }
  return absl::OkStatus();
}

void WriteMap(YAML::Emitter& e, const Schema& schema) {
  e << YAML::BeginMap;
  for (const auto& [key, field] : schema) {
    e << YAML::Key << key << YAML::Value;
    field.write(e);
  }
  e << YAML::EndMap;
}

Field Section(Schema schema) {
  auto shared = std::make_shared<const Schema>(std::move(schema));
  return {[shared](const YAML::Node& n, const std::string& k) { return ReadMap(n, k, *shared); },
          [shared](YAML::Emitter& e) { WriteMap(e, *shared); }};
}

void WriteIntList(YAML::Emitter& e, const std::vector<int>& v) {
  e << YAML::Flow << YAML::BeginSeq;
  for (int x : v) e << x;
  e << YAML::EndSeq;
}

Field Gpus(WorkersSection* w) {
  return {[w](const YAML::Node& n, const std::string& k) -> absl::Status {
            if (n.IsScalar() && n.Scalar() == "all") {
              w->all_gpus = true;
              w->gpus.clear();
              return absl::OkStatus();
            }
            if (!n.IsSequence()) return KeyError(k, "must be 'all' or a list of GPU indices");
            w->all_gpus = false;
            return IntList(n, k, &w->gpus);
          },
          [w](YAML::Emitter& e) {
            if (w->all_gpus) {
              e << "all";
            } else {
              WriteIntList(e, w->gpus);
            }
          }};
}

Field CpuAffinity(WorkersSection* w) {
  return {[w](const YAML::Node& n, const std::string& k) -> absl::Status {
            if (n.IsScalar()) {
              w->cpu_affinity = n.Scalar();
              w->cpu_sets.clear();
              if (w->cpu_affinity != "none" && w->cpu_affinity != "auto") {
                return KeyError(k, "must be none, auto or a list of CPU lists (one per worker)");
              }
              return absl::OkStatus();
            }
            if (!n.IsSequence()) return KeyError(k, "must be none, auto or a list of CPU lists");
            w->cpu_affinity = "explicit";
            w->cpu_sets.assign(n.size(), {});
            for (size_t i = 0; i < n.size(); ++i) {
              RANKD_RETURN_IF_ERROR(IntList(n[i], absl::StrCat(k, "[", i, "]"), &w->cpu_sets[i]));
            }
            return absl::OkStatus();
          },
          [w](YAML::Emitter& e) {
            if (w->cpu_affinity != "explicit") {
              e << w->cpu_affinity;
              return;
            }
            e << YAML::BeginSeq;
            for (const auto& set : w->cpu_sets) WriteIntList(e, set);
            e << YAML::EndSeq;
          }};
}

// Every key of the config file, bound to the fields of `c` (docs/config.md describes each).
Schema ServeSchema(ServeConfig& c, const std::string& base) {
  ModelSection& m = c.model;
  engine::EngineOptions& eo = m.engine;
  ServerSection& s = c.server;
  Limits& l = c.limits;
  WorkersSection& w = c.workers;
  LoggingSection& g = c.logging;
  ResultCacheSection& rc = c.result_cache;
  DepthControlSection& dc = c.depth_control;
  ShapingSection& sh = c.shaping;
  return {
      {"model", Section({{"dir", Path(&eo.model_dir, base)},
                         {"name", String(&m.name)},
                         {"backend", String(&eo.backend.kind)},
                         {"head", OptString(&eo.settings.head)},
                         {"query_template", OptString(&eo.settings.query_template)},
                         {"item_template", OptString(&eo.settings.item_template)},
                         {"preset", OptString(&eo.settings.preset)},
                         {"instruction", OptString(&eo.settings.instruction)},
                         {"threads", Number(&eo.backend.threads)},
                         {"tokenizer_threads", Number(&eo.tokenizer_threads)},
                         {"max_batch_tokens", Number(&eo.backend.max_batch_tokens)},
                         {"prefix_cache_mb", MebiBytes(&eo.prefix_cache_bytes)},
                         {"cuda_strategy", String(&eo.backend.strategy)},
                         {"cuda_graphs", Bool(&eo.backend.cuda_graphs)},
                         {"precision", String(&eo.backend.precision)}})},
      {"server",
       Section({{"listen", String(&s.listen)},
                {"metrics_listen", String(&s.metrics_listen)},
                {"http_listen", String(&s.http_listen)},
                {"http_max_connections", Number(&s.http_max_connections)},
                {"http_read_timeout_s", Number(&s.http_read_timeout_s)},
                {"http_max_buffered_bytes", Number(&s.http_max_buffered_bytes)},
                {"http_request_timeout_s", Number(&s.http_request_timeout_s)},
                {"queue_size", Number(&s.queue_size)},
                {"max_queue_wait_s", Number(&s.max_queue_wait_s)},
                {"drain_timeout_s", Number(&s.drain_timeout_s)},
                {"stream_chunk_items", Number(&s.stream_chunk_items)},
                {"initial_seconds_per_item", Number(&s.initial_seconds_per_item)},
                {"tls", Section({{"cert_file", Path(&s.tls.cert_file, base)},
                                 {"key_file", Path(&s.tls.key_file, base)},
                                 {"client_ca_file", Path(&s.tls.client_ca_file, base)},
                                 {"refresh_interval_s", Number(&s.tls.refresh_interval_s)}})},
                {"auth", Section({{"api_keys_file", Path(&s.auth.api_keys_file, base)},
                                  {"protect_metrics", Bool(&s.auth.protect_metrics)}})},
                {"reflection", OptBool(&s.reflection)}})},
      {"limits", Section({{"max_items", Number(&l.max_items)},
                          {"max_query_tokens", Number(&l.max_query_tokens)},
                          {"max_item_tokens", Number(&l.max_item_tokens)},
                          {"max_request_tokens", Number(&l.max_request_tokens)},
                          {"max_message_bytes", Number(&l.max_message_bytes)},
                          {"max_item_bytes", Number(&l.max_item_bytes)},
                          {"max_query_bytes", Number(&l.max_query_bytes)},
                          {"truncate", TruncateMode(&l.truncate)}})},
      {"workers", Section({{"count", Number(&w.count)},
                           {"gpus", Gpus(&w)},
                           {"workers_per_gpu", Number(&w.workers_per_gpu)},
                           {"cpu_affinity", CpuAffinity(&w)},
                           {"max_inflight", Number(&w.max_inflight)},
                           {"min_ready", Number(&w.min_ready)},
                           {"startup_timeout_s", Number(&w.startup_timeout_s)},
                           {"ping_interval_s", Number(&w.ping_interval_s)},
                           {"ping_timeout_s", Number(&w.ping_timeout_s)},
                           {"call_timeout_s", Number(&w.call_timeout_s)},
                           {"restart_backoff_s", Number(&w.restart_backoff_s)},
                           {"restart_backoff_max_s", Number(&w.restart_backoff_max_s)},
                           {"max_failed_starts", Number(&w.max_failed_starts)},
                           {"stop_timeout_s", Number(&w.stop_timeout_s)},
                           {"socket_dir", Path(&w.socket_dir, base)}})},
      {"result_cache",
       Section({{"capacity_mb", Number(&rc.capacity_mb)}, {"ttl_s", Number(&rc.ttl_s)}})},
      {"depth_control", Section({{"enabled", Bool(&dc.enabled)},
                                 {"target_p99_s", Number(&dc.target_p99_s)},
                                 {"min_depth", Number(&dc.min_depth)},
                                 {"max_depth", Number(&dc.max_depth)},
                                 {"kp", Number(&dc.kp)},
                                 {"ki", Number(&dc.ki)},
                                 {"kd", Number(&dc.kd)},
                                 {"window_s", Number(&dc.window_s)}})},
      {"shaping", Section({{"batch_max_wait_s", Number(&sh.batch_max_wait_s)},
                           {"busy_threshold", Number(&sh.busy_threshold)}})},
      {"logging", Section({{"level", String(&g.level)},
                           {"format", String(&g.format)},
                           {"access_log", Bool(&g.access_log)}})},
  };
}

}  // namespace

absl::StatusOr<ServeConfig> ParseServeConfig(absl::string_view yaml, absl::string_view base_dir,
                                             absl::string_view origin) {
  ServeConfig c;
  const std::string base(base_dir);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", e.what()));
  }
  if (root.IsNull()) return c;  // an empty file: all defaults
  const Schema schema = ServeSchema(c, base);
  absl::Status status = ReadMap(root, "", schema);
  if (!status.ok()) return Annotate(status, origin);
  return c;
}

std::string ServeConfigToYaml(const ServeConfig& config) {
  ServeConfig copy = config;  // the schema binds mutable fields; writing only reads them
  YAML::Emitter e;
  WriteMap(e, ServeSchema(copy, ""));
  return std::string(e.c_str()) + "\n";
}

absl::StatusOr<ServeConfig> LoadServeConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--config ", path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  const fs::path dir = fs::absolute(fs::path(path)).parent_path();
  return ParseServeConfig(text.str(), dir.string(), path);
}

absl::string_view EmbeddedDefaultConfigText() { return kEmbeddedConfigText; }

absl::StatusOr<ServeConfig> DefaultServeConfig() {
  return ParseServeConfig(kEmbeddedConfigText, kEmbeddedConfigBaseDir,
                          "embedded default config (configs/tiny-cpu.yaml)");
}

absl::Status FinalizeServeConfig(ServeConfig* config) {
  ModelSection& m = config->model;
  const engine::EngineOptions& eo = m.engine;
  const std::string& dir = eo.model_dir;
  if (dir.empty()) return KeyError("model.dir", "is required (or give --model)");
  if (m.name.empty()) m.name = fs::path(dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  if (eo.backend.kind != "cpu" && eo.backend.kind != "cuda") {
    return KeyError("model.backend",
                    absl::StrCat("must be cpu or cuda (got '", eo.backend.kind, "')"));
  }
  if (eo.backend.strategy != "ibpc" && eo.backend.strategy != "multi-item") {
    return KeyError("model.cuda_strategy", "must be ibpc or multi-item");
  }
  if (eo.backend.precision != "bf16" && eo.backend.precision != "fp8") {
    return KeyError("model.precision",
                    absl::StrCat("must be bf16 or fp8 (got '", eo.backend.precision, "')"));
  }
  if (eo.backend.precision == "fp8" && eo.backend.kind == "cpu") {
    return KeyError("model.precision",
                    "fp8 needs model.backend cuda (the cpu backend computes in float32)");
  }
  const engine::ModelSettings& ms = eo.settings;
  if (ms.query_template && ms.query_template->find("{query}") == std::string::npos) {
    return KeyError("model.query_template", "must contain {query}");
  }
  if (ms.item_template && ms.item_template->find("{item}") == std::string::npos) {
    return KeyError("model.item_template", "must contain {item}");
  }
  auto positive = [](const std::string& key, double v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return KeyError(key, absl::StrCat("must be positive (got ", v, ")"));
  };
  auto non_negative = [](const std::string& key, double v) -> absl::Status {
    if (v >= 0) return absl::OkStatus();
    return KeyError(key, absl::StrCat("must not be negative (got ", v, ")"));
  };
  RANKD_RETURN_IF_ERROR(non_negative("model.threads", eo.backend.threads));
  RANKD_RETURN_IF_ERROR(positive("model.tokenizer_threads", eo.tokenizer_threads));
  RANKD_RETURN_IF_ERROR(positive("model.max_batch_tokens", eo.backend.max_batch_tokens));

  ServerSection& s = config->server;
  if (s.listen.empty()) return KeyError("server.listen", "is required");
  if (s.tls.cert_file.empty() != s.tls.key_file.empty()) {
    return s.tls.cert_file.empty()
               ? KeyError("server.tls.cert_file", "is required with server.tls.key_file")
               : KeyError("server.tls.key_file", "is required with server.tls.cert_file");
  }
  if (!s.tls.client_ca_file.empty() && s.tls.cert_file.empty()) {
    return KeyError("server.tls.client_ca_file",
                    "needs server.tls.cert_file and server.tls.key_file (mutual TLS is TLS)");
  }
  RANKD_RETURN_IF_ERROR(positive("server.tls.refresh_interval_s", s.tls.refresh_interval_s));
  if (s.auth.protect_metrics && s.auth.api_keys_file.empty()) {
    return KeyError("server.auth.protect_metrics", "needs server.auth.api_keys_file");
  }
  if (!s.reflection.has_value()) s.reflection = IsLoopbackAddress(s.listen);
  RANKD_RETURN_IF_ERROR(non_negative("server.queue_size", s.queue_size));
  RANKD_RETURN_IF_ERROR(non_negative("server.max_queue_wait_s", s.max_queue_wait_s));
  RANKD_RETURN_IF_ERROR(positive("server.http_request_timeout_s", s.http_request_timeout_s));
  RANKD_RETURN_IF_ERROR(non_negative("server.drain_timeout_s", s.drain_timeout_s));
  RANKD_RETURN_IF_ERROR(positive("server.stream_chunk_items", s.stream_chunk_items));
  RANKD_RETURN_IF_ERROR(
      non_negative("server.initial_seconds_per_item", s.initial_seconds_per_item));

  const Limits& l = config->limits;
  RANKD_RETURN_IF_ERROR(positive("limits.max_items", l.max_items));
  RANKD_RETURN_IF_ERROR(positive("limits.max_query_tokens", l.max_query_tokens));
  RANKD_RETURN_IF_ERROR(positive("limits.max_item_tokens", l.max_item_tokens));
  RANKD_RETURN_IF_ERROR(positive("limits.max_request_tokens", l.max_request_tokens));
  RANKD_RETURN_IF_ERROR(positive("limits.max_message_bytes", l.max_message_bytes));
  RANKD_RETURN_IF_ERROR(non_negative("limits.max_item_bytes", l.max_item_bytes));
  RANKD_RETURN_IF_ERROR(non_negative("limits.max_query_bytes", l.max_query_bytes));
  // gRPC takes an int; the transport limit is set above this one (see ScorerService).
  if (l.max_message_bytes > (int64_t{1} << 29)) {
    return KeyError("limits.max_message_bytes", "must be at most 536870912 (512 MiB)");
  }
  if (s.http_max_buffered_bytes < l.max_message_bytes) {
    return KeyError("server.http_max_buffered_bytes",
                    absl::StrCat("must be at least limits.max_message_bytes=", l.max_message_bytes,
                                 " (got ", s.http_max_buffered_bytes, "): else no such body fits"));
  }

  WorkersSection& w = config->workers;
  RANKD_RETURN_IF_ERROR(non_negative("workers.count", w.count));
  RANKD_RETURN_IF_ERROR(positive("workers.workers_per_gpu", w.workers_per_gpu));
  RANKD_RETURN_IF_ERROR(non_negative("workers.max_inflight", w.max_inflight));
  if (w.max_inflight == 0) {
    w.max_inflight = eo.backend.kind == "cuda" ? kDefaultMaxInflightCuda : kDefaultMaxInflightCpu;
  }
  RANKD_RETURN_IF_ERROR(positive("workers.min_ready", w.min_ready));
  RANKD_RETURN_IF_ERROR(positive("workers.startup_timeout_s", w.startup_timeout_s));
  RANKD_RETURN_IF_ERROR(positive("workers.ping_interval_s", w.ping_interval_s));
  RANKD_RETURN_IF_ERROR(positive("workers.ping_timeout_s", w.ping_timeout_s));
  RANKD_RETURN_IF_ERROR(positive("workers.call_timeout_s", w.call_timeout_s));
  RANKD_RETURN_IF_ERROR(non_negative("workers.restart_backoff_s", w.restart_backoff_s));
  RANKD_RETURN_IF_ERROR(non_negative("workers.restart_backoff_max_s", w.restart_backoff_max_s));
  RANKD_RETURN_IF_ERROR(non_negative("workers.max_failed_starts", w.max_failed_starts));
  RANKD_RETURN_IF_ERROR(non_negative("workers.stop_timeout_s", w.stop_timeout_s));
  for (int gpu : w.gpus) {
    if (gpu < 0) return KeyError("workers.gpus", absl::StrCat("bad GPU index ", gpu));
  }
  // count 0 is one worker per GPU (x workers_per_gpu), the listed GPUs or, with no list, every
  // visible one (PlanWorkers): only the cuda backend has GPUs to count.
  if (w.count == 0 && eo.backend.kind != "cuda") {
    return KeyError("workers.count",
                    "must be positive with the cpu backend (0 means one worker per GPU: cuda only)");
  }

  const ResultCacheSection& rc = config->result_cache;
  RANKD_RETURN_IF_ERROR(non_negative("result_cache.capacity_mb", rc.capacity_mb));
  if (rc.capacity_mb > (int64_t{1} << 30)) {
    return KeyError("result_cache.capacity_mb", "must be at most 2^30 MiB");
  }
  RANKD_RETURN_IF_ERROR(positive("result_cache.ttl_s", rc.ttl_s));

  const DepthControlSection& dc = config->depth_control;
  RANKD_RETURN_IF_ERROR(positive("depth_control.target_p99_s", dc.target_p99_s));
  RANKD_RETURN_IF_ERROR(positive("depth_control.min_depth", dc.min_depth));
  if (dc.max_depth < dc.min_depth) {
    return KeyError(
        "depth_control.max_depth",
        absl::StrCat("must be at least min_depth=", dc.min_depth, " (got ", dc.max_depth, ")"));
  }
  RANKD_RETURN_IF_ERROR(non_negative("depth_control.kp", dc.kp));
  RANKD_RETURN_IF_ERROR(non_negative("depth_control.ki", dc.ki));
  RANKD_RETURN_IF_ERROR(non_negative("depth_control.kd", dc.kd));
  RANKD_RETURN_IF_ERROR(positive("depth_control.window_s", dc.window_s));

  const ShapingSection& sh = config->shaping;
  RANKD_RETURN_IF_ERROR(positive("shaping.batch_max_wait_s", sh.batch_max_wait_s));
  if (!(sh.busy_threshold > 0 && sh.busy_threshold <= 1)) {
    return KeyError("shaping.busy_threshold",
                    absl::StrCat("must be in (0, 1] (got ", sh.busy_threshold, ")"));
  }

  const LoggingSection& g = config->logging;
  if (g.format != "text" && g.format != "json") {
    return KeyError("logging.format", absl::StrCat("must be text or json (got '", g.format, "')"));
  }
  return absl::OkStatus();
}

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  absl::string_view host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace rankd::server
