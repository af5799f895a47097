#include "rankd/backend/registry.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "rankd/backend/cpu/cpu_backend.h"
#include "spdlog/spdlog.h"
#ifdef RANKD_HAVE_CUDA
#include "rankd/backend/cuda/cuda_backend.h"
#endif

namespace rankd::backend {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options,
                                                       const std::string& model_dir,
                                                       const HeadSpec& head) {
  if (options.kind == kCpuBackend) return cpu::CreateCpuBackend(options, model_dir, head);
  if (options.kind == kCudaBackend) {
#ifdef RANKD_HAVE_CUDA
    return cuda::CreateCudaBackend(options, model_dir, head);
#else
    return absl::UnavailableError(
        "backend 'cuda' is not built into this binary (configure with -DRANKD_CUDA=ON)");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("backend '", options.kind, "' is unknown (cpu, cuda)"));
}

absl::Status ApplyBackendEnvironment(BackendOptions* options,
                                     const std::function<const char*(const char*)>& getenv) {
  // A 0/1 switch: unset keeps `*value`.
  auto flag = [&](const char* name, bool* value) -> absl::Status {
    const char* v = getenv(name);
    if (v == nullptr) return absl::OkStatus();
    const std::string s(v);
    if (s != "0" && s != "1") {
      return absl::InvalidArgumentError(absl::StrCat(name, ": '", s, "' is not 0 or 1"));
    }
    *value = s == "1";
    return absl::OkStatus();
  };
  auto number = [&](const char* name, int* value) -> absl::Status {
    const char* v = getenv(name);
    if (v == nullptr) return absl::OkStatus();
    if (!absl::SimpleAtoi(v, value) || *value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": '", v, "' is not a non-negative integer"));
    }
    return absl::OkStatus();
  };
  bool graphs = options->cuda_graphs;
  if (absl::Status s = flag("RANKD_CUDA_GRAPHS", &graphs); !s.ok()) return s;
  if (options->cuda_graphs && !graphs) {
    spdlog::warn(
        "RANKD_CUDA_GRAPHS=0 in the environment: CUDA graphs off (the config or flags "
        "had them on)");
  }
  options->cuda_graphs = graphs;
  BackendOptions::CudaSwitches& c = options->cuda;
  for (auto [name, value] :
       {std::pair{"RANKD_CUDA_STATS", &c.stats}, std::pair{"RANKD_CUDA_PROFILE", &c.profile},
        std::pair{"RANKD_CUDA_GEMM_TUNE", &c.gemm_tune},
        std::pair{"RANKD_CUDA_FUSE_Q_ROPE", &c.fuse_q_rope},
        std::pair{"RANKD_CUDA_FUSE_K_ROPE", &c.fuse_k_rope},
        std::pair{"RANKD_CUDA_FUSE_QK_NORM", &c.fuse_qk_norm},
        std::pair{"RANKD_CUDA_ATTENTION_PIPELINE", &c.attention_pipeline},
        std::pair{"RANKD_CUDA_ATTENTION_WGMMA", &c.attention_wgmma},
        std::pair{"RANKD_CUDA_ATTENTION_FOUR_BLOCKS", &c.attention_four_blocks},
        std::pair{"RANKD_CUDA_ATTENTION_THREE_BLOCKS", &c.attention_three_blocks},
        std::pair{"RANKD_CUDA_ATTENTION_PREFETCH", &c.attention_prefetch},
        std::pair{"RANKD_CUDA_PDL", &c.pdl},
        std::pair{"RANKD_CUDA_FP8_GROUP_SCALES", &c.fp8_group_scales},
        std::pair{"RANKD_CUDA_FP8_PROMOTED", &c.fp8_promoted},
        std::pair{"RANKD_CUDA_FOLD_NORMS", &c.fold_norms}}) {
    if (absl::Status s = flag(name, value); !s.ok()) return s;
  }
  if (const char* v = getenv("RANKD_CUDA_OWN_GEMM"); v != nullptr) {
    using OwnGemm = BackendOptions::CudaSwitches::OwnGemm;
    const std::string s(v);
    if (s != "0" && s != "1" && s != "auto") {
      return absl::InvalidArgumentError(
          absl::StrCat("RANKD_CUDA_OWN_GEMM: '", s, "' is not 0, 1 or auto"));
    }
    c.own_gemm = s == "auto" ? OwnGemm::kAuto : s == "1" ? OwnGemm::kOn : OwnGemm::kOff;
  }
  if (const char* v = getenv("RANKD_CUDA_OWN_GEMM_VARIANTS"); v != nullptr) {
    using OwnVariants = BackendOptions::CudaSwitches::OwnVariants;
    const std::string s(v);
    if (s != "pingpong" && s != "pingpong128" && s != "all") {
      return absl::InvalidArgumentError(absl::StrCat("RANKD_CUDA_OWN_GEMM_VARIANTS: '", s,
                                                     "' is not pingpong, pingpong128 or all"));
    }
    c.own_gemm_variants = s == "all"           ? OwnVariants::kAll
                          : s == "pingpong128" ? OwnVariants::kPingPong128
                                               : OwnVariants::kPingPong;
  }
  if (absl::Status s = number("RANKD_CUDA_PROFILE_SKIP", &c.profile_skip); !s.ok()) return s;
  if (const char* v = getenv("RANKD_CUDA_ATTENTION_OVERLAP"); v != nullptr) {
    const std::string s(v);
    if (s != "0" && s != "1" && s != "auto") {
      return absl::InvalidArgumentError(
          absl::StrCat("RANKD_CUDA_ATTENTION_OVERLAP: '", s, "' is not 0, 1 or auto"));
    }
    c.attention_overlap =
        s == "auto" ? BackendOptions::CudaSwitches::kAttentionOverlapAuto : s[0] - '0';
  }
  if (const char* v = getenv("RANKD_CUDA_ATTENTION_WARPGROUPS"); v != nullptr) {
    const std::string s(v);
    // "auto" is kAttentionWarpgroupsAuto (0), which no number may spell.
    if (s == "auto") {
      c.attention_warpgroups = BackendOptions::CudaSwitches::kAttentionWarpgroupsAuto;
    } else if (s != "1" && s != "2" && s != "3") {
      return absl::InvalidArgumentError(
          absl::StrCat("RANKD_CUDA_ATTENTION_WARPGROUPS: '", s, "' is not auto, 1, 2 or 3"));
    } else {
      c.attention_warpgroups = s[0] - '0';
    }
  }
  // A set of linear layers: a comma list of qkv, o_proj, gate_up, down (empty: none); with
  // `all_or_none`, 1 (all four) and 0 (none) too. Unset keeps `*f`.
  using Fp8Linears = BackendOptions::CudaSwitches::Fp8Linears;
  auto layers = [&](const char* var, bool all_or_none, Fp8Linears* f) -> absl::Status {
    const char* v = getenv(var);
    if (v == nullptr) return absl::OkStatus();
    if (all_or_none && (absl::string_view(v) == "0" || absl::string_view(v) == "1")) {
      const bool on = absl::string_view(v) == "1";
      *f = {on, on, on, on};
      return absl::OkStatus();
    }
    *f = {false, false, false, false};
    for (absl::string_view name : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
      name = absl::StripAsciiWhitespace(name);
      bool* layer = name == "qkv"       ? &f->qkv
                    : name == "o_proj"  ? &f->o_proj
                    : name == "gate_up" ? &f->gate_up
                    : name == "down"    ? &f->down
                                        : nullptr;
      if (layer == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(var, ": '", name, "' is not ", all_or_none ? "0, 1 or " : "",
                         "a linear layer (qkv, o_proj, gate_up, down)"));
      }
      *layer = true;
    }
    return absl::OkStatus();
  };
  if (absl::Status s = layers("RANKD_CUDA_FP8_LINEARS", false, &c.fp8_linears); !s.ok()) return s;
  if (absl::Status s = layers("RANKD_CUDA_FP8_FAST_ACCUM", true, &c.fp8_fast_accum); !s.ok()) {
    return s;
  }
  return number("RANKD_CUDA_GEMM_CANDIDATES", &c.gemm_candidates);
}

}  // namespace rankd::backend
