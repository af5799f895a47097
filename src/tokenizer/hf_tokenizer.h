// The Hugging Face `tokenizer.json` tokenizer with the BPE model (byte-level BPE as Qwen2/Qwen3,
// Llama 3 and Mistral Nemo ship it; sentencepiece-style BPE with byte fallback as Llama 2, Mistral
// 7B and Gemma do). Encode gives the ids that HF `tokenizers` (as transformers 5 configures it from
// tokenizer_config.json) gives (each step's unit in brackets, every one with its "from JSON"
// factory; hf_tokenizer.cc loads the files and runs the steps):
//
//   0. a tokenizer_class whose transformers class builds its own pipeline (LlamaTokenizer,
//      GemmaTokenizer) replaces tokenizer.json's normalizer, pre-tokenizer and model options by
//      that class's, as AutoTokenizer does [hf_tokenizer.cc];
//   1. added tokens (`added_tokens`) are cut out of the raw text, leftmost-longest, honoring
//      single_word / lstrip / rstrip; those with `normalized: true` are matched after step 2
//      [hf_added_tokens.h];
//   2. the normalizer (NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Lowercase, Sequence) runs on
//      the text between them [hf_normalizers.h];
//   3. the pre-tokenizer (Split with a regex or string, Metaspace, ByteLevel, Sequence) cuts words
//      [hf_pre_tokenizers.h, hf_regex.h];
//   4. the BPE model merges each word (merges as ["a", "b"] or "a b", ignore_merges,
//      continuing_subword_prefix / end_of_word_suffix, unk_token, fuse_unk, byte_fallback), behind
//      a cache of merged words [hf_bpe.h]; model.vocab and model.merges are read straight from the
//      file's text, not into a Json tree (hf_json.h's BpeTables);
//   5. with add_special_tokens, the post-processor (TemplateProcessing, ByteLevel, Sequence) adds
//      its tokens [hf_post_processors.h]; tokenizer_config.json's add_bos_token / add_eos_token,
//      when present, replace it by a template of bos_token / eos_token, as transformers 5 does.
//
// The decoder is not read (rankd never decodes). Anything else in the file that changes ids is
// rejected at load with the field that names it.
#ifndef RANKD_TOKENIZER_HF_TOKENIZER_H_
#define RANKD_TOKENIZER_HF_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/tokenizer/tokenizer.h"

namespace rankd::tokenizer {

// `config_path` (tokenizer_config.json) may name a file that does not exist.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& json_path,
                                                           const std::string& config_path);

}  // namespace rankd::tokenizer

#endif  // RANKD_TOKENIZER_HF_TOKENIZER_H_
