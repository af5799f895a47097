#include "rankd/server/config/config.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/ascii.h"
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

// The longest duration any `_s` key may hold: 10^7 s (about 116 days) is past every sensible
// setting, and far below what overflows a deadline (now + the duration in nanoseconds of a 64-bit
// clock: 292 years).
constexpr double kMaxSeconds = 1e7;

// A number as messages show it: an integer as is; a double as the shortest text that reads back
// as it, in digits where they are few ("0.1", "10000000", "1e+20", "nan").
template <typename T>
std::string NumberText(T v) {
  if constexpr (std::is_integral_v<T>) {
    return absl::StrCat(v);
  } else {
    char buffer[64];
    const bool digits = v == 0 || (std::abs(v) >= 1e-4 && std::abs(v) < 1e15);
    const auto [end, ec] =
        digits ? std::to_chars(buffer, buffer + sizeof(buffer), v, std::chars_format::fixed)
               : std::to_chars(buffer, buffer + sizeof(buffer), v);
    return std::string(buffer, end);
  }
}

// The range of a number key, in interval notation in messages: "[1, 1048576]", "(0, 10000000]".
template <typename T>
struct Bounds {
  T min;
  T max;
  bool min_excluded = false;  // (min, max]: for durations and factors that must be positive

  bool Contains(T v) const { return (min_excluded ? v > min : v >= min) && v <= max; }
  std::string ToString() const {
    return absl::StrCat(min_excluded ? "(" : "[", NumberText(min), ", ", NumberText(max), "]");
  }
};
// Durations that must be positive (timeouts, intervals), and those that may be 0 (off, none).
constexpr Bounds<double> kPositiveSeconds{0, kMaxSeconds, true};
constexpr Bounds<double> kSeconds{0, kMaxSeconds};

template <typename T>
absl::Status CheckBounds(const std::string& key, const Bounds<T>& bounds, T v) {
  if (bounds.Contains(v)) return absl::OkStatus();
  return KeyError(key,
                  absl::StrCat("must be in ", bounds.ToString(), " (got ", NumberText(v), ")"));
}

// "a or b", "a, b or c".
std::string Alternatives(const std::vector<std::string>& values) {
  if (values.size() < 2) return absl::StrJoin(values, "");
  return absl::StrCat(absl::StrJoin(values.begin(), values.end() - 1, ", "), " or ", values.back());
}

// One YAML mapping key: how to read it into its field, how to write the field back (the parser
// and ServeConfigToYaml share one table, so a key is declared once), and its range. Ranges are
// checked on the final config, flags applied (FinalizeServeConfig), so that a flag cannot set
// what the file may not; every message names the key, the range and the value.
struct Field {
  std::function<absl::Status(const YAML::Node&, const std::string& key)> read;
  std::function<void(YAML::Emitter&)> write;  // the value only (the key is the table's)
  std::function<absl::Status(const std::string& key)> check = [](const std::string&) {
    return absl::OkStatus();
  };
};
using Schema = std::map<std::string, Field>;

Field String(std::string* v) {
  return {[v](const YAML::Node& n, const std::string& k) { return Scalar(n, k, "a string", v); },
          [v](YAML::Emitter& e) { e << YAML::DoubleQuoted << *v; }};
}
// `names` (backend.h's lists) as Choice takes them.
template <size_t N>
std::vector<std::string> Names(const std::array<absl::string_view, N>& names) {
  return std::vector<std::string>(names.begin(), names.end());
}
// A string that must be one of `values`.
Field Choice(std::string* v, std::vector<std::string> values) {
  Field f = String(v);
  f.check = [v, values = std::move(values)](const std::string& k) -> absl::Status {
    if (std::find(values.begin(), values.end(), *v) != values.end()) return absl::OkStatus();
    return KeyError(k, absl::StrCat("must be ", Alternatives(values), " (got '", *v, "')"));
  };
  return f;
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
// A prompt template: when set, it must hold `placeholder`.
Field Template(std::optional<std::string>* v, absl::string_view placeholder) {
  Field f = OptString(v);
  f.check = [v, placeholder](const std::string& k) -> absl::Status {
    if (!v->has_value() || absl::StrContains(**v, placeholder)) return absl::OkStatus();
    return KeyError(k, absl::StrCat("must contain ", placeholder));
  };
  return f;
}
template <typename T>
Field Number(T* v, Bounds<T> bounds) {
  return {[v](const YAML::Node& n, const std::string& k) {
            return Scalar(n, k, std::is_integral_v<T> ? "an integer" : "a number", v);
          },
          [v](YAML::Emitter& e) {
            if constexpr (std::is_integral_v<T>) {
              e << *v;
            } else {
              e << YAML::Precision(17) << *v;  // round-trips every double
            }
          },
          [v, bounds](const std::string& k) { return CheckBounds(k, bounds, *v); }};
}
// A size given in MiB in the file, kept in bytes (whole MiB: what the file can say).
Field MebiBytes(size_t* bytes, Bounds<int64_t> mebibytes) {
  return {[bytes, mebibytes](const YAML::Node& n, const std::string& k) -> absl::Status {
            int64_t mb = 0;
            RANKD_RETURN_IF_ERROR(Scalar(n, k, "an integer (MiB)", &mb));
            // Here, not only in `check`: a negative or huge count has no value in bytes.
            RANKD_RETURN_IF_ERROR(CheckBounds(k, mebibytes, mb));
            *bytes = static_cast<size_t>(mb) << 20;
            return absl::OkStatus();
          },
          [bytes](YAML::Emitter& e) { e << static_cast<int64_t>(*bytes >> 20); },
          [bytes, mebibytes](const std::string& k) {
            return CheckBounds(k, mebibytes, static_cast<int64_t>(*bytes >> 20));
          }};
}
Field Bool(bool* v) {
  return {
      [v](const YAML::Node& n, const std::string& k) { return Scalar(n, k, "true or false", v); },
      [v](YAML::Emitter& e) { e << YAML::TrueFalseBool << *v; }};
}
// A list of strings, each checked by `check_item` (its key "k[i]") and at most `max_items`.
Field StringList(
    std::vector<std::string>* v, int max_items,
    std::function<absl::Status(const std::string& key, const std::string&)> check_item) {
  return {
      [v](const YAML::Node& n, const std::string& k) -> absl::Status {
        if (!n.IsSequence()) return KeyError(k, "must be a list of strings");
        v->assign(n.size(), "");
        for (size_t i = 0; i < n.size(); ++i) {
          RANKD_RETURN_IF_ERROR(Scalar(n[i], absl::StrCat(k, "[", i, "]"), "a string", &(*v)[i]));
        }
        return absl::OkStatus();
      },
      [v](YAML::Emitter& e) {
        e << YAML::Flow << YAML::BeginSeq;
        for (const std::string& s : *v) e << YAML::DoubleQuoted << s;
        e << YAML::EndSeq;
      },
      [v, max_items, check_item](const std::string& k) -> absl::Status {
        if (static_cast<int>(v->size()) > max_items) {
          return KeyError(k, absl::StrCat("at most ", max_items, " entries (got ", v->size(), ")"));
        }
        for (size_t i = 0; i < v->size(); ++i) {
          RANKD_RETURN_IF_ERROR(check_item(absl::StrCat(k, "[", i, "]"), (*v)[i]));
        }
        return absl::OkStatus();
      }};
}

// server.served_model_names[i]: 1..kMaxModelNameBytes bytes, no control characters (the
// name is echoed in headers of no kind, but in logs and answers).
absl::Status CheckModelName(const std::string& key, const std::string& name) {
  if (name.empty() || name.size() > static_cast<size_t>(kMaxModelNameBytes)) {
    return KeyError(
        key, absl::StrCat("must be 1 to ", kMaxModelNameBytes, " bytes (got ", name.size(), ")"));
  }
  if (std::any_of(name.begin(), name.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    return KeyError(key, "must not contain control characters");
  }
  return absl::OkStatus();
}

// server.cors_allow_origins[i]: "*", or an origin as browsers send it: http:// or https://, a
// host and an optional port, no path, no trailing slash, printable ASCII without spaces or commas
// (it is sent back in Access-Control-Allow-Origin verbatim).
absl::Status CheckCorsOrigin(const std::string& key, const std::string& origin) {
  if (origin == "*") return absl::OkStatus();
  const size_t scheme = origin.find("://");
  const bool http = scheme != std::string::npos && (origin.compare(0, scheme, "http") == 0 ||
                                                    origin.compare(0, scheme, "https") == 0);
  const std::string host = http ? origin.substr(scheme + 3) : "";
  const bool clean = std::all_of(origin.begin(), origin.end(), [](char c) {
    return c > ' ' && c < 0x7f && c != ',' && c != '"';
  });
  if (!http || host.empty() || host.find('/') != std::string::npos || !clean ||
      origin.size() > 256) {
    return KeyError(key, absl::StrCat("must be \"*\" or an origin such as https://app.example.com "
                                      "or http://localhost:3000 (scheme, host, optional port; no "
                                      "path), at most 256 bytes (got '",
                                      origin.substr(0, 256), "')"));
  }
  return absl::OkStatus();
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
// model.identity: empty, or "sha256:" and 16 lower-case hex digits (model::ModelIdentity's form).
Field Identity(std::string* v) {
  Field f = String(v);
  f.check = [v](const std::string& k) -> absl::Status {
    constexpr absl::string_view kPrefix = "sha256:";
    const bool hex = v->size() == kPrefix.size() + 16 && absl::StartsWith(*v, kPrefix) &&
                     std::all_of(v->begin() + kPrefix.size(), v->end(), [](char c) {
                       return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
                     });
    if (v->empty() || hex) return absl::OkStatus();
    return KeyError(k, absl::StrCat("must be empty or sha256: and 16 hex digits (got '", *v, "')"));
  };
  return f;
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
  // yaml-cpp keeps every pair of a mapping, a key given twice too (the last would win): the
  // line each key was first given on, to refuse a second one naming both.
  std::map<std::string, int> lines;
  for (const auto& kv : node) {
    // Found by fuzz/fuzz_serve_config: a key that is a list or a mapping threw out of the parser.
    if (!kv.first.IsScalar()) {
      return KeyError(prefix.empty() ? "(top level)" : prefix, "keys must be plain names");
    }
    const std::string name = kv.first.Scalar();
    const std::string key = prefix.empty() ? name : absl::StrCat(prefix, ".", name);
    const int line = kv.first.Mark().line + 1;
    if (auto [first, fresh] = lines.emplace(name, line); !fresh) {
      return KeyError(key, absl::StrCat("given twice (lines ", first->second, " and ", line, ")"));
    }
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

absl::Status CheckMap(const std::string& prefix, const Schema& schema) {
  for (const auto& [name, field] : schema) {
    RANKD_RETURN_IF_ERROR(field.check(prefix.empty() ? name : absl::StrCat(prefix, ".", name)));
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
          [shared](YAML::Emitter& e) { WriteMap(e, *shared); },
          [shared](const std::string& k) { return CheckMap(k, *shared); }};
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
          },
          [w](const std::string& k) -> absl::Status {
            for (size_t i = 0; i < w->gpus.size(); ++i) {
              RANKD_RETURN_IF_ERROR(
                  CheckBounds(absl::StrCat(k, "[", i, "]"), Bounds<int>{0, 1023}, w->gpus[i]));
            }
            return absl::OkStatus();
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

// Every key of the config file, bound to the fields of `c`, with its range (docs/config.md
// describes each).
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
  // Counts of things (connections, items, tokens, workers, threads): far above any real setting,
  // far below what overflows the arithmetic done with them.
  constexpr int kMaxCount = 1 << 20;
  constexpr int kMaxThreads = 1024;
  constexpr int64_t kMaxBytes = int64_t{1} << 29;  // 512 MiB: gRPC's int limit, doubled, fits
  return {
      {"model",
       Section(
           {{"dir", Path(&eo.model_dir, base)},
            {"name", String(&m.name)},
            {"identity", Identity(&m.identity)},
            {"backend", Choice(&eo.backend.kind, Names(backend::kBackendKinds))},
            {"head", OptString(&eo.settings.head)},
            {"query_template", Template(&eo.settings.query_template, engine::kQueryPlaceholder)},
            {"item_template", Template(&eo.settings.item_template, engine::kItemPlaceholder)},
            {"preset", OptString(&eo.settings.preset)},
            {"instruction", OptString(&eo.settings.instruction)},
            {"threads", Number(&eo.backend.threads, {0, kMaxThreads})},
            {"tokenizer_threads", Number(&eo.tokenizer_threads, {1, kMaxThreads})},
            {"max_batch_tokens", Number(&eo.backend.max_batch_tokens, {1, kMaxCount})},
            {"prefix_cache_mb", MebiBytes(&eo.prefix_cache_bytes, {0, int64_t{1} << 30})},
            {"cuda_strategy", Choice(&eo.backend.strategy, Names(backend::kStrategies))},
            {"cuda_graphs", Bool(&eo.backend.cuda_graphs)},
            {"precision", Choice(&eo.backend.precision, Names(backend::kPrecisions))}})},
      {"server",
       Section(
           {{"listen", String(&s.listen)},
            {"metrics_listen", String(&s.metrics_listen)},
            {"http_listen", String(&s.http_listen)},
            {"http_max_connections", Number(&s.http_max_connections, {1, kMaxCount})},
            {"http_read_timeout_s", Number(&s.http_read_timeout_s, kPositiveSeconds)},
            {"http_max_buffered_bytes",
             Number(&s.http_max_buffered_bytes, {int64_t{1}, int64_t{1} << 40})},
            {"http_request_timeout_s", Number(&s.http_request_timeout_s, kPositiveSeconds)},
            {"queue_size", Number(&s.queue_size, {0, kMaxCount})},
            {"max_queue_wait_s", Number(&s.max_queue_wait_s, kSeconds)},
            {"drain_delay_s", Number(&s.drain_delay_s, kSeconds)},
            {"drain_timeout_s", Number(&s.drain_timeout_s, kSeconds)},
            {"stream_chunk_items", Number(&s.stream_chunk_items, {1, kMaxCount})},
            {"initial_seconds_per_item", Number(&s.initial_seconds_per_item, {0.0, 60.0})},
            {"max_buffered_answer_bytes",
             Number(&s.max_buffered_answer_bytes, {int64_t{1024}, int64_t{1} << 40})},
            {"served_model_names",
             StringList(&s.served_model_names, kMaxServedModelNames, CheckModelName)},
            {"strict_model_name", Bool(&s.strict_model_name)},
            {"cors_allow_origins",
             StringList(&s.cors_allow_origins, kMaxCorsOrigins, CheckCorsOrigin)},
            {"tls", Section({{"cert_file", Path(&s.tls.cert_file, base)},
                             {"key_file", Path(&s.tls.key_file, base)},
                             {"client_ca_file", Path(&s.tls.client_ca_file, base)},
                             {"refresh_interval_s", Number(&s.tls.refresh_interval_s,
                                                           {1, static_cast<int>(kMaxSeconds)})}})},
            {"auth", Section({{"api_keys_file", Path(&s.auth.api_keys_file, base)},
                              {"protect_metrics", Bool(&s.auth.protect_metrics)}})},
            {"reflection", OptBool(&s.reflection)}})},
      {"limits",
       Section(
           {{"max_items", Number(&l.max_items, {1, kMaxCount})},
            {"max_query_tokens", Number(&l.max_query_tokens, {1, kMaxCount})},
            {"max_item_tokens", Number(&l.max_item_tokens, {1, kMaxCount})},
            {"max_request_tokens", Number(&l.max_request_tokens, {int64_t{1}, int64_t{1} << 40})},
            {"max_message_bytes", Number(&l.max_message_bytes, {1, kMaxBytes})},
            {"max_id_bytes", Number(&l.max_id_bytes, {int64_t{Limits::kMinIdBytes}, kMaxBytes})},
            {"max_answer_bytes", Number(&l.max_answer_bytes, {int64_t{1024}, int64_t{1} << 40})},
            {"max_item_bytes", Number(&l.max_item_bytes, {0, kMaxBytes})},
            {"max_query_bytes", Number(&l.max_query_bytes, {0, kMaxBytes})},
            {"truncate", TruncateMode(&l.truncate)}})},
      {"workers", Section({{"count", Number(&w.count, {0, kMaxThreads})},
                           {"gpus", Gpus(&w)},
                           {"workers_per_gpu", Number(&w.workers_per_gpu, {1, kMaxThreads})},
                           {"cpu_affinity", CpuAffinity(&w)},
                           {"max_inflight", Number(&w.max_inflight, {0, kMaxThreads})},
                           {"min_ready", Number(&w.min_ready, {1, kMaxThreads})},
                           {"startup_timeout_s", Number(&w.startup_timeout_s, kPositiveSeconds)},
                           {"ping_interval_s", Number(&w.ping_interval_s, kPositiveSeconds)},
                           {"ping_timeout_s", Number(&w.ping_timeout_s, kPositiveSeconds)},
                           {"call_timeout_s", Number(&w.call_timeout_s, kPositiveSeconds)},
                           {"restart_backoff_s", Number(&w.restart_backoff_s, kSeconds)},
                           {"restart_backoff_max_s", Number(&w.restart_backoff_max_s, kSeconds)},
                           {"max_failed_starts", Number(&w.max_failed_starts, {0, kMaxCount})},
                           {"stop_timeout_s", Number(&w.stop_timeout_s, kSeconds)},
                           {"socket_dir", Path(&w.socket_dir, base)}})},
      {"result_cache",
       Section({{"capacity_mb", Number(&rc.capacity_mb, {int64_t{0}, int64_t{1} << 30})},
                {"ttl_s", Number(&rc.ttl_s, kPositiveSeconds)}})},
      {"depth_control", Section({{"enabled", Bool(&dc.enabled)},
                                 {"target_p99_s", Number(&dc.target_p99_s, kPositiveSeconds)},
                                 {"min_depth", Number(&dc.min_depth, {1, kMaxCount})},
                                 {"max_depth", Number(&dc.max_depth, {1, kMaxCount})},
                                 {"kp", Number(&dc.kp, {0.0, 1e6})},
                                 {"ki", Number(&dc.ki, {0.0, 1e6})},
                                 {"kd", Number(&dc.kd, {0.0, 1e6})},
                                 {"window_s", Number(&dc.window_s, kPositiveSeconds)}})},
      {"shaping", Section({{"batch_max_wait_s", Number(&sh.batch_max_wait_s, kPositiveSeconds)},
                           {"busy_threshold", Number(&sh.busy_threshold, {0.0, 1.0, true})}})},
      {"logging",
       Section({{"level", Choice(&g.level, {"trace", "debug", "info", "warn", "error", "off"})},
                {"format", Choice(&g.format, {"text", "json"})},
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
  // Every key's range first (the table declares them), then the rules between keys.
  RANKD_RETURN_IF_ERROR(CheckMap("", ServeSchema(*config, "")));
  ModelSection& m = config->model;
  const engine::EngineOptions& eo = m.engine;
  const std::string& dir = eo.model_dir;
  if (dir.empty()) return KeyError("model.dir", "is required (or give --model)");
  if (m.name.empty()) m.name = fs::path(dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  if (config->server.served_model_names.empty()) config->server.served_model_names = {m.name};
  if (eo.backend.precision == backend::kPrecisionFp8 && eo.backend.kind == backend::kCpuBackend) {
    return KeyError("model.precision",
                    "fp8 needs model.backend cuda (the cpu backend computes in float32)");
  }

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
  if (s.auth.protect_metrics && s.auth.api_keys_file.empty()) {
    return KeyError("server.auth.protect_metrics", "needs server.auth.api_keys_file");
  }
  if (!s.reflection.has_value()) s.reflection = IsLoopbackAddress(s.listen);
  // The totals must hold the largest answer and the largest body.
  const Limits& l = config->limits;
  if (s.max_buffered_answer_bytes < l.max_answer_bytes) {
    return KeyError("server.max_buffered_answer_bytes",
                    absl::StrCat("must be at least limits.max_answer_bytes=", l.max_answer_bytes,
                                 " (got ", s.max_buffered_answer_bytes, ")"));
  }
  if (s.http_max_buffered_bytes < l.max_message_bytes) {
    return KeyError("server.http_max_buffered_bytes",
                    absl::StrCat("must be at least limits.max_message_bytes=", l.max_message_bytes,
                                 " (got ", s.http_max_buffered_bytes, "): else no such body fits"));
  }

  WorkersSection& w = config->workers;
  if (w.max_inflight == 0) {
    w.max_inflight =
        eo.backend.kind == backend::kCudaBackend ? kDefaultMaxInflightCuda : kDefaultMaxInflightCpu;
  }
  // count 0 is one worker per GPU (x workers_per_gpu), the listed GPUs or, with no list, every
  // visible one (PlanWorkers, which also holds min_ready to the count it plans): only the cuda
  // backend has GPUs to count.
  if (w.count == 0 && eo.backend.kind != backend::kCudaBackend) {
    return KeyError(
        "workers.count",
        "must be positive with the cpu backend (0 means one worker per GPU: cuda only)");
  }

  const DepthControlSection& dc = config->depth_control;
  if (dc.max_depth < dc.min_depth) {
    return KeyError(
        "depth_control.max_depth",
        absl::StrCat("must be at least min_depth=", dc.min_depth, " (got ", dc.max_depth, ")"));
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
