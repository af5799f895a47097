// Finds and dlopens the sentencepiece shim (see sp_processor.h).
#include <dlfcn.h>

#include <mutex>

#include "sp_processor.h"

namespace rankd::tokenizer {
namespace {

struct Shim {
  SpLoadFn load = nullptr;
  std::string error;
};

// RTLD_DEEPBIND keeps the shim's libsentencepiece (and the protobuf-lite it exports) binding to
// itself rather than to the process's protobuf. AddressSanitizer's interceptors refuse it
// (google/sanitizers#611): sanitized builds (scripts/fuzz.sh, CI's sanitizer run) load it without,
// which works where no libprotobuf is in the process and may clash where one is.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kDeepBind = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kDeepBind = 0;
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif

const Shim& GetShim() {
  static Shim shim;
  static std::once_flag once;
  std::call_once(once, [] {
    const int flags = RTLD_NOW | RTLD_LOCAL | kDeepBind;
    void* handle = dlopen(kSpShimName, flags);
    std::string first_error = handle ? "" : dlerror();
    if (handle == nullptr) handle = dlopen(RANKD_SP_SHIM_BUILD_PATH, flags);
    if (handle == nullptr) {
      shim.error = "cannot load the sentencepiece shim: " + first_error + "; " + dlerror();
      return;
    }
    shim.load = reinterpret_cast<SpLoadFn>(dlsym(handle, kSpLoadSymbol));
    if (shim.load == nullptr) shim.error = std::string("sentencepiece shim: ") + dlerror();
  });
  return shim;
}

}  // namespace

std::unique_ptr<SpProcessor> LoadSpProcessor(const std::string& path, std::string* error) {
  const Shim& shim = GetShim();
  if (shim.load == nullptr) {
    *error = shim.error;
    return nullptr;
  }
  return std::unique_ptr<SpProcessor>(shim.load(path.c_str(), error));
}

}  // namespace rankd::tokenizer
