// sentencepiece, isolated. Debian's libsentencepiece.so.0 embeds its own protobuf-lite (3.14) and
// exports those symbols; a process that also loads libprotobuf 3.21 (every rankd binary: gRPC)
// would bind one library's protobuf calls to the other's copies and abort at start-up. So
// sentencepiece lives in a shim, librankd_sentencepiece.so (sp_processor.cc), which rankd never
// links: LoadSpShim() dlopens it with RTLD_LOCAL | RTLD_DEEPBIND, so that sentencepiece resolves
// protobuf to its own copy and nothing else sees it. Only std types cross this boundary (the
// sentencepiece header also clashes with abseil's string_view).
#ifndef RANKD_TOKENIZER_SP_PROCESSOR_H_
#define RANKD_TOKENIZER_SP_PROCESSOR_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rankd::tokenizer {

class SpProcessor {
 public:
  virtual ~SpProcessor() = default;
  // Encodes without BOS/EOS. Returns false and sets *error on failure. Thread-safe.
  virtual bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const = 0;
  virtual int PieceToId(std::string_view piece) const = 0;  // unk id when absent
  virtual bool IsUnknown(int id) const = 0;
  virtual int bos_id() const = 0;  // -1 when the model has none
  virtual int vocab_size() const = 0;
};

// The shim's one exported symbol: loads a model file, or returns null and sets *error.
using SpLoadFn = SpProcessor* (*)(const char* path, std::string* error);
inline constexpr char kSpLoadSymbol[] = "RankdSentencePieceLoad";
inline constexpr char kSpShimName[] = "librankd_sentencepiece.so";

// Loads a sentencepiece model through the shim (dlopened once per process). The shim is looked
// up by name (LD_LIBRARY_PATH, the binary's RUNPATH: $ORIGIN/../lib) and then at its build path.
std::unique_ptr<SpProcessor> LoadSpProcessor(const std::string& path, std::string* error);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_SP_PROCESSOR_H_
