// sentencepiece, isolated. Debian's libsentencepiece.so.0 embeds its own protobuf-lite (3.14) and
// exports those symbols; a process that also loads libprotobuf 3.21 (every rankd binary: gRPC)
// would bind one library's protobuf calls to the other's copies and abort at start-up. So
// sentencepiece lives in a shim, librankd_sentencepiece.so (sp_processor.cc), which rankd never
// links: LoadSpProcessor() loads it with dlmopen(LM_ID_NEWLM) into a link namespace of its own,
// with its own libc, libstdc++ and libsentencepiece, where nothing of the process is visible.
// (RTLD_DEEPBIND did the same job before, but AddressSanitizer refuses it, google/sanitizers#611;
// a namespace works in every build, sanitized or not.) The shim has its own heap, so only a C
// interface crosses the boundary and no memory changes hands: the shim copies ids out through a
// callback, errors into the caller's buffer. The shim is never sanitized (sanitizer runtimes live
// in the main namespace only).
#ifndef RANKD_TOKENIZER_SP_PROCESSOR_H_
#define RANKD_TOKENIZER_SP_PROCESSOR_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

extern "C" {
// The shim's one exported symbol, kSpApiSymbol. Functions that can fail return 0 on success and
// write a NUL-terminated message of at most error_size bytes into error otherwise. All are
// thread-safe for a loaded model.
struct RankdSpApi {
  // Loads a model file; null on failure.
  void* (*load)(const char* path, char* error, size_t error_size);
  void (*unload)(void* model);
  // Encodes without BOS/EOS and hands the ids [n] to sink(sink_ctx, ids, n) once.
  int (*encode)(const void* model, const char* text, size_t text_size,
                void (*sink)(void* sink_ctx, const int* ids, size_t n), void* sink_ctx, char* error,
                size_t error_size);
  int (*piece_to_id)(const void* model, const char* piece, size_t piece_size);  // unk when absent
  int (*is_unknown)(const void* model, int id);
  int (*bos_id)(const void* model);  // -1 when the model has none
  int (*vocab_size)(const void* model);
};
}

namespace rankd::tokenizer {

inline constexpr char kSpApiSymbol[] = "RankdSentencePieceApi";
inline constexpr char kSpShimName[] = "librankd_sentencepiece.so";

// A loaded sentencepiece model, in the shim's namespace. Thread-safe.
class SpProcessor {
 public:
  virtual ~SpProcessor() = default;
  // Encodes without BOS/EOS. Returns false and sets *error on failure.
  virtual bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const = 0;
  virtual int PieceToId(std::string_view piece) const = 0;  // unk id when absent
  virtual bool IsUnknown(int id) const = 0;
  virtual int bos_id() const = 0;  // -1 when the model has none
  virtual int vocab_size() const = 0;
};

// Loads a sentencepiece model through the shim (loaded once per process). The shim is looked up
// by name (LD_LIBRARY_PATH, the binary's RUNPATH: $ORIGIN/../lib) and then at its build path.
std::unique_ptr<SpProcessor> LoadSpProcessor(const std::string& path, std::string* error);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_SP_PROCESSOR_H_
