// rankd-bench make-model: writes a random-weight model in Hugging Face layout that both rankd and
// HF transformers load (config.json in the transformers 5.x style, model.safetensors, tokenizer).
#ifndef RANKD_BENCH_MAKE_MODEL_H_
#define RANKD_BENCH_MAKE_MODEL_H_

namespace rankd::bench {

int RunMakeModel(int argc, char** argv, int first);

}  // namespace rankd::bench

#endif  // RANKD_BENCH_MAKE_MODEL_H_
