#include "rankd/engine/engine.h"

#include <cmath>
#include <deque>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "rankd/common/field_error.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/model/input_checks.h"
#include "rankd/model/safetensors.h"
#include "rankd/model/weights.h"
#include "spdlog/spdlog.h"
#include "yaml-cpp/yaml.h"

namespace rankd::engine {

Item Item::Text(std::string text) {
  Item it;
  it.kind = Kind::kText;
  it.text = std::move(text);
  return it;
}

Item Item::Ids(std::vector<int32_t> ids) {
  Item it;
  it.kind = Kind::kIds;
  it.ids = std::move(ids);
  return it;
}

Item Item::Embedding(std::vector<float> values) {
  Item it;
  it.kind = Kind::kEmbedding;
  it.embedding = std::move(values);
  return it;
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

ModelSettings ModelSettings::MergedWith(const ModelSettings& over) const {
  ModelSettings m = *this;
  if (over.query_template) m.query_template = over.query_template;
  if (over.item_template) m.item_template = over.item_template;
  if (over.head) m.head = over.head;
  if (over.preset) m.preset = over.preset;
  if (over.instruction) m.instruction = over.instruction;
  return m;
}

absl::StatusOr<ModelSettings> ModelSettings::FromModelDir(const std::string& model_dir) {
  const std::string path = model_dir + "/rankd.yaml";
  ModelSettings s;
  if (!std::filesystem::exists(path)) return s;
  try {
    YAML::Node root = YAML::LoadFile(path);
    if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a mapping"));
    for (auto kv : root) {
      const std::string key = kv.first.as<std::string>();
      const std::string value = kv.second.as<std::string>();
      if (key == "query_template") {
        s.query_template = value;
      } else if (key == "item_template") {
        s.item_template = value;
      } else if (key == "head") {
        s.head = value;
      } else if (key == "preset") {
        s.preset = value;
      } else if (key == "instruction") {
        s.instruction = value;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": unknown key '", key,
                         "' (query_template, item_template, head, preset, instruction)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return s;
}

absl::StatusOr<backend::HeadSpec> ParseHeadSpec(absl::string_view spec,
                                                const model::ModelConfig& config,
                                                const tokenizer::Tokenizer* tok) {
  backend::HeadSpec head;
  absl::string_view rest = spec;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("head '", spec, "': ", why,
                     " (expected classifier[:INDEX], yes_no:YES,NO or logit:TOKEN)"));
  };
  // A token given as an id, or as a piece of the tokenizer's vocabulary.
  auto token = [&](const std::string& text, int32_t* id) -> absl::Status {
    if (absl::SimpleAtoi(text, id)) return absl::OkStatus();
    if (tok == nullptr) return bad(absl::StrCat("'", text, "' is not a token id"));
    auto piece = tok->PieceToId(text);
    if (!piece.ok()) return bad(piece.status().message());
    *id = *piece;
    return absl::OkStatus();
  };
  if (absl::ConsumePrefix(&rest, "classifier")) {
    head.type = backend::HeadSpec::Type::kClassifier;
    if (absl::ConsumePrefix(&rest, ":")) {
      if (!absl::SimpleAtoi(rest, &head.index)) return bad("INDEX is not an integer");
    } else if (!rest.empty()) {
      return bad("unknown head type");
    }
  } else if (absl::ConsumePrefix(&rest, "yes_no:")) {
    head.type = backend::HeadSpec::Type::kYesNo;
    std::vector<std::string> parts = absl::StrSplit(rest, absl::MaxSplits(',', 1));
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) return bad("needs YES,NO");
    RANKD_RETURN_IF_ERROR(token(parts[0], &head.yes_id));
    RANKD_RETURN_IF_ERROR(token(parts[1], &head.no_id));
  } else if (absl::ConsumePrefix(&rest, "logit:")) {
    head.type = backend::HeadSpec::Type::kLogit;
    if (rest.empty()) return bad("needs TOKEN");
    RANKD_RETURN_IF_ERROR(token(std::string(rest), &head.token_id));
  } else {
    return bad("unknown head type");
  }
  RANKD_RETURN_IF_ERROR(backend::ValidateHead(config, head));
  return head;
}

absl::StatusOr<backend::HeadSpec> Engine::InitBeforeBackend(const EngineOptions& options,
                                                            const model::ModelConfig& config) {
  RANKD_ASSIGN_OR_RETURN(text_, TextEncoder::Load(options));
  const std::string head_spec = text_->settings().head.value_or(
      config.head_kind == model::HeadKind::kSequenceClassification ? "classifier:0"
                                                                   : "yes_no:yes,no");
  return ParseHeadSpec(head_spec, config, &text_->tokenizer());
}

absl::Status Engine::CheckModel(const EngineOptions& options) {
  Engine engine;
  RANKD_ASSIGN_OR_RETURN(const model::ModelConfig config,
                         model::ModelConfig::FromHfDir(options.model_dir));
  RANKD_RETURN_IF_ERROR(engine.InitBeforeBackend(options, config).status());
  RANKD_ASSIGN_OR_RETURN(auto tensors, model::SafetensorsModel::OpenDir(options.model_dir));
  return Annotate(model::BindTensors(config, *tensors).status(), options.model_dir);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const EngineOptions& options, const backend::BackendFactory& create_backend) {
  std::unique_ptr<Engine> engine(new Engine());
  RANKD_ASSIGN_OR_RETURN(auto config, model::ModelConfig::FromHfDir(options.model_dir));
  RANKD_ASSIGN_OR_RETURN(backend::HeadSpec head, engine->InitBeforeBackend(options, config));
  RANKD_ASSIGN_OR_RETURN(engine->backend_,
                         create_backend(options.backend, options.model_dir, head));
  engine->tokenizer_threads_ = std::max(1, options.tokenizer_threads);
  engine->max_batch_tokens_ = std::max(1, options.backend.max_batch_tokens);
  engine->prefix_cache_ = std::make_unique<PrefixCache>(options.prefix_cache_bytes);
  return engine;
}

absl::Status CheckEncodedText(int item, absl::Span<const int32_t> ids) {
  if (!ids.empty()) return absl::OkStatus();
  return InvalidItemField(item, ".text", "encodes to no tokens");
}

absl::StatusOr<std::vector<std::vector<int32_t>>> Engine::EncodeTexts(
    absl::Span<const std::string> texts, int64_t max_tokens) const {
  return text_->EncodeItems(texts, tokenizer_threads_, max_tokens);
}

absl::StatusOr<backend::ItemBatch> Engine::EncodeItems(const std::vector<Item>& items) const {
  const model::ModelConfig& c = config();
  std::vector<std::string> texts;
  for (const Item& item : items) {
    if (item.kind == Item::Kind::kText) texts.push_back(item.text);
  }
  RANKD_ASSIGN_OR_RETURN(const auto encoded, EncodeTexts(texts));
  backend::ItemBatch batch;
  size_t next_text = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    switch (it.kind) {
      case Item::Kind::kText: {
        const std::vector<int32_t>& ids = encoded[next_text++];
        RANKD_RETURN_IF_ERROR(CheckEncodedText(static_cast<int>(i), ids));
        batch.AddIds(ids);
        break;
      }
      case Item::Kind::kIds:
        if (it.ids.empty()) {
          return InvalidItemField(static_cast<int>(i), ".ids", "empty");
        }
        RANKD_RETURN_IF_ERROR(
            AtItem(static_cast<int>(i), model::CheckTokenIds(it.ids, ".ids", c.vocab_size)));
        batch.AddIds(it.ids);
        break;
      case Item::Kind::kEmbedding:
        if (it.embedding.empty() || it.embedding.size() % c.hidden_size != 0) {
          return InvalidItemField(
              static_cast<int>(i), ".embedding",
              absl::StrCat(it.embedding.size(),
                           " values is not a positive multiple of hidden_size=", c.hidden_size));
        }
        RANKD_RETURN_IF_ERROR(AtItem(
            static_cast<int>(i), model::CheckEmbeddingValues(it.embedding, ".embedding",
                                                             c.hidden_size)));
        batch.AddEmbeddings(it.embedding, c.hidden_size);
        break;
    }
  }
  return batch;
}

absl::Status ScoreGroupsInPasses(backend::Backend& backend,
                                 absl::Span<const backend::Backend::ScoreGroup> groups,
                                 int max_batch_tokens,
                                 const std::function<void(const PassInfo&)>& after_pass) {
  const int hidden = backend.config().hidden_size;
  std::vector<backend::Backend::ScoreGroup> pass;
  std::deque<backend::ItemBatch> slices;  // the parts of split groups in `pass` (stable addresses)
  int pass_tokens = 0;
  // Scores the pending pass; `groups_done` leading groups are complete after it.
  auto flush = [&](size_t groups_done) -> absl::Status {
    if (pass.empty()) return absl::OkStatus();
    RANKD_RETURN_IF_ERROR(backend.ScoreGroups(pass));
    PassInfo info;
    info.groups_done = groups_done;
    info.groups = static_cast<int>(pass.size());
    for (const backend::Backend::ScoreGroup& g : pass) info.items += g.items->num_items();
    info.tokens = pass_tokens;
    pass.clear();
    slices.clear();
    pass_tokens = 0;
    if (after_pass) after_pass(info);
    return absl::OkStatus();
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    const backend::Backend::ScoreGroup& group = groups[g];
    const backend::ItemBatch& all = *group.items;
    const int n = all.num_items();
    for (int begin = 0; begin < n;) {
      // Items [begin, end) fill the rest of this pass.
      int end = begin, tokens = 0;
      while (end < n && pass_tokens + tokens + all.item_length(end) <= max_batch_tokens) {
        tokens += all.item_length(end++);
      }
      if (end == begin) {
        if (pass_tokens > 0) {
          RANKD_RETURN_IF_ERROR(flush(g));
          continue;
        }
        tokens = all.item_length(end++);  // longer than the budget: alone
      }
      if (begin == 0 && end == n) {
        pass.push_back(group);
      } else {
        slices.push_back(all.Slice(begin, end, hidden));
        pass.push_back({group.prefix, &slices.back(), group.scores.subspan(begin, end - begin)});
      }
      pass_tokens += tokens;
      begin = end;
    }
  }
  return flush(groups.size());
}

absl::StatusOr<PreparedRequest> Engine::Prepare(const ScoreRequest& request) const {
  PreparedRequest p;
  if (request.query_ids) {
    p.prefix_ids = *request.query_ids;
  } else {
    RANKD_ASSIGN_OR_RETURN(p.prefix_ids, EncodeQuery(request.query));
  }
  RANKD_RETURN_IF_ERROR(model::CheckTokenIds(p.prefix_ids, "query_ids", config().vocab_size));
  RANKD_ASSIGN_OR_RETURN(p.items, EncodeItems(request.items));
  for (int i = 0; i < p.items.num_items(); ++i) {
    RANKD_RETURN_IF_ERROR(AtItem(
        i,
        model::CheckContextLength(static_cast<int64_t>(p.prefix_ids.size()), p.items.item_length(i),
                                  config().max_position_embeddings, "")));
  }
  p.apply_sigmoid = request.apply_sigmoid;
  return p;
}

absl::StatusOr<std::shared_ptr<const backend::PrefixState>> Engine::PrefixFor(
    const std::vector<int32_t>& ids) {
  std::shared_ptr<const backend::PrefixState> prefix = prefix_cache_->Get(ids);
  if (prefix == nullptr) {
    RANKD_ASSIGN_OR_RETURN(prefix, backend_->EncodePrefix(ids));
    prefix_cache_->Put(ids, prefix);
  }
  return prefix;
}

void Engine::ScoreMany(absl::Span<const PreparedRequest> requests, const ScoreDoneFn& done,
                       const std::function<void(const PassInfo&)>& on_pass) {
  std::vector<Scoring> ready;
  ready.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const PreparedRequest& request = requests[i];
    absl::StatusOr<std::shared_ptr<const backend::PrefixState>> prefix =
        PrefixFor(request.prefix_ids);
    if (!prefix.ok()) {
      done(i, prefix.status());
      continue;
    }
    Scoring& s = ready.emplace_back();
    s.index = i;
    s.request = &request;
    s.prefix = *std::move(prefix);
    s.result.prefix_tokens = static_cast<int>(request.prefix_ids.size());
    s.result.item_tokens = request.items.num_tokens();
    s.result.scores.resize(request.items.num_items());
  }
  std::vector<backend::Backend::ScoreGroup> groups;
  groups.reserve(ready.size());
  for (Scoring& s : ready) {
    groups.push_back({s.prefix.get(), &s.request->items, absl::MakeSpan(s.result.scores)});
  }
  auto answer = [&](Scoring& s) {
    if (s.request->apply_sigmoid) {
      for (float& score : s.result.scores) score = Sigmoid(score);
    }
    done(s.index, std::move(s.result));
    // No later pass reads an answered request's prefix: let it go now, so that an evicted one
    // stops counting against the prefix cache's budget (and its memory is freed) mid-step.
    s.prefix.reset();
  };
  size_t answered = 0;
  const absl::Status status =
      ScoreGroupsInPasses(*backend_, groups, max_batch_tokens_, [&](const PassInfo& pass) {
        if (on_pass) on_pass(pass);
        for (; answered < pass.groups_done; ++answered) answer(ready[answered]);
      });
  if (status.ok()) {
    for (; answered < ready.size(); ++answered) answer(ready[answered]);
    return;
  }
  // A pass failed: each request not answered yet on its own, so that the error stays with the
  // request that causes it.
  for (; answered < ready.size(); ++answered) {
    const absl::Status one = ScoreGroupsInPasses(
        *backend_, absl::MakeConstSpan(&groups[answered], 1), max_batch_tokens_);
    if (one.ok()) {
      answer(ready[answered]);
    } else {
      done(ready[answered].index, one);
    }
  }
}

std::vector<absl::StatusOr<ScoreResult>> Engine::ScoreMany(
    absl::Span<const PreparedRequest> requests) {
  std::vector<absl::StatusOr<ScoreResult>> results(requests.size(),
                                                   absl::UnknownError("not scored"));
  ScoreMany(requests, [&](size_t i, absl::StatusOr<ScoreResult> r) { results[i] = std::move(r); });
  return results;
}

std::vector<absl::StatusOr<ScoreResult>> Engine::ScoreMany(
    absl::Span<const ScoreRequest> requests) {
  std::vector<absl::StatusOr<ScoreResult>> results(requests.size(),
                                                   absl::UnknownError("not scored"));
  std::vector<PreparedRequest> prepared;
  std::vector<size_t> index;  // prepared[k] is requests[index[k]]
  prepared.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<PreparedRequest> p = Prepare(requests[i]);
    if (!p.ok()) {
      results[i] = p.status();
      continue;
    }
    prepared.push_back(*std::move(p));
    index.push_back(i);
  }
  ScoreMany(prepared,
            [&](size_t k, absl::StatusOr<ScoreResult> r) { results[index[k]] = std::move(r); });
  return results;
}

absl::StatusOr<ScoreResult> Engine::Score(const PreparedRequest& request) {
  return std::move(ScoreMany(absl::MakeConstSpan(&request, 1))[0]);
}

absl::StatusOr<ScoreResult> Engine::Score(const ScoreRequest& request) {
  RANKD_ASSIGN_OR_RETURN(const PreparedRequest prepared, Prepare(request));
  return Score(prepared);
}

}  // namespace rankd::engine
