// Finds the sentencepiece shim, loads it into a link namespace of its own (see sp_processor.h)
// and wraps its C interface as SpProcessor.
#include <dlfcn.h>

#include <mutex>

#include "sp_processor.h"

namespace rankd::tokenizer {
namespace {

constexpr size_t kErrorSize = 512;

struct Shim {
  const RankdSpApi* api = nullptr;
  std::string error;
};

void* OpenInNewNamespace(const char* path) {
  return dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
}

const Shim& GetShim() {
  static Shim shim;
  static std::once_flag once;
  std::call_once(once, [] {
    void* handle = OpenInNewNamespace(kSpShimName);
    std::string first_error = handle ? "" : dlerror();
    if (handle == nullptr) handle = OpenInNewNamespace(RANKD_SP_SHIM_BUILD_PATH);
    if (handle == nullptr) {
      shim.error = "cannot load the sentencepiece shim: " + first_error + "; " + dlerror();
      return;
    }
    shim.api = static_cast<const RankdSpApi*>(dlsym(handle, kSpApiSymbol));
    if (shim.api == nullptr) shim.error = std::string("sentencepiece shim: ") + dlerror();
  });
  return shim;
}

class ShimProcessor final : public SpProcessor {
 public:
  ShimProcessor(const RankdSpApi* api, void* model) : api_(api), model_(model) {}
  ~ShimProcessor() override { api_->unload(model_); }
  ShimProcessor(const ShimProcessor&) = delete;
  ShimProcessor& operator=(const ShimProcessor&) = delete;

  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const override {
    char message[kErrorSize] = "";
    const auto sink = [](void* ctx, const int* data, size_t n) {
      static_cast<std::vector<int>*>(ctx)->assign(data, data + n);
    };
    if (api_->encode(model_, text.data(), text.size(), sink, ids, message, sizeof(message)) != 0) {
      *error = message;
      return false;
    }
    return true;
  }
  int PieceToId(std::string_view piece) const override {
    return api_->piece_to_id(model_, piece.data(), piece.size());
  }
  bool IsUnknown(int id) const override { return api_->is_unknown(model_, id) != 0; }
  int bos_id() const override { return api_->bos_id(model_); }
  int vocab_size() const override { return api_->vocab_size(model_); }

 private:
  const RankdSpApi* api_;
  void* model_;
};

}  // namespace

std::unique_ptr<SpProcessor> LoadSpProcessor(const std::string& path, std::string* error) {
  const Shim& shim = GetShim();
  if (shim.api == nullptr) {
    *error = shim.error;
    return nullptr;
  }
  char message[kErrorSize] = "";
  void* model = shim.api->load(path.c_str(), message, sizeof(message));
  if (model == nullptr) {
    *error = message;
    return nullptr;
  }
  return std::make_unique<ShimProcessor>(shim.api, model);
}

}  // namespace rankd::tokenizer
