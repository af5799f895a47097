// The backend registry: CreateBackend by name, and the RANKD_CUDA_* switches read once into
// BackendOptions (ApplyBackendEnvironment) instead of by the backend.
#include "rankd/backend/registry.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/golden.h"

namespace rankd::backend {
namespace {

using ::testing::HasSubstr;

// An environment made of `vars`.
std::function<const char*(const char*)> Env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(ApplyBackendEnvironmentTest, AnEmptyEnvironmentKeepsEveryOption) {
  BackendOptions o;
  o.cuda_graphs = false;
  o.cuda.gemm_candidates = 5;
  const BackendOptions before = o;
  ASSERT_TRUE(ApplyBackendEnvironment(&o, Env({})).ok());
  EXPECT_TRUE(o == before);
}

TEST(ApplyBackendEnvironmentTest, EverySwitchLandsInItsField) {
  BackendOptions o;
  ASSERT_TRUE(ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_GRAPHS", "0"},
                                               {"RANKD_CUDA_STATS", "1"},
                                               {"RANKD_CUDA_PROFILE", "1"},
                                               {"RANKD_CUDA_PROFILE_SKIP", "7"},
                                               {"RANKD_CUDA_GEMM_TUNE", "0"},
                                               {"RANKD_CUDA_GEMM_CANDIDATES", "16"},
                                               {"RANKD_CUDA_FUSE_Q_ROPE", "0"},
                                               {"RANKD_CUDA_FUSE_K_ROPE", "0"},
                                               {"RANKD_CUDA_FUSE_QK_NORM", "1"},
                                               {"RANKD_CUDA_ATTENTION_PIPELINE", "1"},
                                               {"RANKD_CUDA_ATTENTION_WGMMA", "0"},
                                               {"RANKD_CUDA_ATTENTION_OVERLAP", "1"},
                                               {"RANKD_CUDA_ATTENTION_WARPGROUPS", "3"},
                                               {"RANKD_CUDA_ATTENTION_FOUR_BLOCKS", "0"},
                                               {"RANKD_CUDA_ATTENTION_PREFETCH", "1"},
                                               {"RANKD_CUDA_ATTENTION_THREE_BLOCKS", "1"},
                                               {"RANKD_CUDA_PDL", "1"},
                                               {"RANKD_CUDA_FP8_GROUP_SCALES", "1"},
                                               {"RANKD_CUDA_FP8_FAST_ACCUM", "1"},
                                               {"RANKD_CUDA_FP8_PROMOTED", "1"},
                                               {"RANKD_CUDA_FOLD_NORMS", "1"},
                                               {"RANKD_CUDA_OWN_GEMM", "1"},
                                               {"RANKD_CUDA_OWN_GEMM_VARIANTS", "all"},
                                               {"RANKD_CUDA_FP8_LINEARS", "qkv, down"}}))
                  .ok());
  EXPECT_FALSE(o.cuda_graphs);
  EXPECT_TRUE(o.cuda.stats);
  EXPECT_TRUE(o.cuda.profile);
  EXPECT_EQ(o.cuda.profile_skip, 7);
  EXPECT_FALSE(o.cuda.gemm_tune);
  EXPECT_EQ(o.cuda.gemm_candidates, 16);
  EXPECT_FALSE(o.cuda.fuse_q_rope);
  EXPECT_FALSE(o.cuda.fuse_k_rope);
  EXPECT_TRUE(o.cuda.fuse_qk_norm);
  EXPECT_TRUE(o.cuda.attention_pipeline);
  EXPECT_FALSE(o.cuda.attention_wgmma);
  EXPECT_EQ(o.cuda.attention_overlap, 1);
  EXPECT_EQ(o.cuda.attention_warpgroups, 3);
  EXPECT_FALSE(o.cuda.attention_four_blocks);
  EXPECT_TRUE(o.cuda.attention_prefetch);
  EXPECT_TRUE(o.cuda.attention_three_blocks);
  EXPECT_TRUE(o.cuda.pdl);
  EXPECT_TRUE(o.cuda.fp8_group_scales);
  EXPECT_TRUE(o.cuda.fp8_fast_accum ==
              (BackendOptions::CudaSwitches::Fp8Linears{true, true, true, true}));
  EXPECT_TRUE(o.cuda.fp8_promoted);
  EXPECT_TRUE(o.cuda.fold_norms);
  EXPECT_EQ(o.cuda.own_gemm, BackendOptions::CudaSwitches::OwnGemm::kOn);
  EXPECT_EQ(o.cuda.own_gemm_variants, BackendOptions::CudaSwitches::OwnVariants::kAll);
  // Not yet measured on a GPU, or measured no faster: off unless set; the Hopper GEMM's ping-pong
  // variants (128- and 64-row tiles), and 128-row tiles alone when asked for.
  EXPECT_FALSE(BackendOptions{}.cuda.attention_pipeline);
  EXPECT_EQ(BackendOptions{}.cuda.attention_overlap, 0);
  EXPECT_FALSE(BackendOptions{}.cuda.attention_prefetch);
  EXPECT_FALSE(BackendOptions{}.cuda.attention_three_blocks);
  EXPECT_FALSE(BackendOptions{}.cuda.pdl);
  EXPECT_FALSE(BackendOptions{}.cuda.fp8_group_scales);
  EXPECT_FALSE(BackendOptions{}.cuda.fold_norms);
  // Measured faster (session 43): attention's blocks of warpgroups chosen per pass, the promoted
  // e4m3 kernels timed, gate_up's e4m3 accumulated fast; 1, 0 and 0 turn them off. Session 44:
  // attention's four blocks a multiprocessor (0 turns it off).
  EXPECT_EQ(BackendOptions{}.cuda.attention_warpgroups,
            BackendOptions::CudaSwitches::kAttentionWarpgroupsAuto);
  EXPECT_TRUE(BackendOptions{}.cuda.attention_four_blocks);
  EXPECT_TRUE(BackendOptions{}.cuda.fp8_fast_accum ==
              (BackendOptions::CudaSwitches::Fp8Linears{false, false, true, false}));
  EXPECT_TRUE(BackendOptions{}.cuda.fp8_promoted);
  BackendOptions measured_off;
  ASSERT_TRUE(ApplyBackendEnvironment(&measured_off, Env({{"RANKD_CUDA_ATTENTION_WARPGROUPS", "1"},
                                                          {"RANKD_CUDA_FP8_PROMOTED", "0"},
                                                          {"RANKD_CUDA_FP8_FAST_ACCUM", "0"}}))
                  .ok());
  EXPECT_EQ(measured_off.cuda.attention_warpgroups, 1);
  EXPECT_FALSE(measured_off.cuda.fp8_promoted);
  EXPECT_TRUE(measured_off.cuda.fp8_fast_accum ==
              (BackendOptions::CudaSwitches::Fp8Linears{false, false, false, false}));
  EXPECT_FALSE(BackendOptions{}.cuda.fuse_qk_norm);
  EXPECT_TRUE(BackendOptions{}.cuda.attention_wgmma);  // measured faster: on unless set to 0
  EXPECT_TRUE(BackendOptions{}.cuda.fuse_k_rope);      // likewise
  EXPECT_EQ(BackendOptions{}.cuda.own_gemm_variants,
            BackendOptions::CudaSwitches::OwnVariants::kPingPong);
  BackendOptions pp128;
  ASSERT_TRUE(
      ApplyBackendEnvironment(&pp128, Env({{"RANKD_CUDA_OWN_GEMM_VARIANTS", "pingpong128"}})).ok());
  EXPECT_EQ(pp128.cuda.own_gemm_variants, BackendOptions::CudaSwitches::OwnVariants::kPingPong128);
  EXPECT_TRUE(o.cuda.fp8_linears.qkv);
  EXPECT_FALSE(o.cuda.fp8_linears.o_proj);
  EXPECT_FALSE(o.cuda.fp8_linears.gate_up);
  EXPECT_TRUE(o.cuda.fp8_linears.down);
  // Unset: gate_up (session 44; qkv and gate_up before); empty: none (precision fp8 with every
  // GEMM in bf16, for an A/B).
  EXPECT_TRUE(BackendOptions{}.cuda.fp8_linears ==
              (BackendOptions::CudaSwitches::Fp8Linears{false, false, true, false}));
  BackendOptions none;
  ASSERT_TRUE(ApplyBackendEnvironment(&none, Env({{"RANKD_CUDA_FP8_LINEARS", ""}})).ok());
  EXPECT_TRUE(none.cuda.fp8_linears ==
              (BackendOptions::CudaSwitches::Fp8Linears{false, false, false, false}));
  // RANKD_CUDA_GRAPHS=1 does not turn on what the config turned off.
  BackendOptions off;
  off.cuda_graphs = false;
  ASSERT_TRUE(ApplyBackendEnvironment(&off, Env({{"RANKD_CUDA_GRAPHS", "1"}})).ok());
  EXPECT_TRUE(off.cuda_graphs) << "1 means on, as the variable says";
}

// RANKD_CUDA_OWN_GEMM: auto by default (per layer shape, the faster GEMM), 0, 1 or auto.
TEST(ApplyBackendEnvironmentTest, OwnGemmIsAutoUnlessSet) {
  using OwnGemm = BackendOptions::CudaSwitches::OwnGemm;
  EXPECT_EQ(BackendOptions{}.cuda.own_gemm, OwnGemm::kAuto);
  for (const auto& [value, want] :
       {std::pair{"0", OwnGemm::kOff}, {"1", OwnGemm::kOn}, {"auto", OwnGemm::kAuto}}) {
    BackendOptions o;
    o.cuda.own_gemm = OwnGemm::kOn;
    ASSERT_TRUE(ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_OWN_GEMM", value}})).ok());
    EXPECT_EQ(o.cuda.own_gemm, want) << value;
  }
}

// RANKD_CUDA_FP8_FAST_ACCUM: 1 every linear layer, 0 none, or the layers named (as
// RANKD_CUDA_FP8_LINEARS' list; empty: none).
TEST(ApplyBackendEnvironmentTest, FastAccumulationTakesAllNoneOrTheLayersNamed) {
  using Fp8Linears = BackendOptions::CudaSwitches::Fp8Linears;
  for (const auto& [value, want] : {std::pair{"1", Fp8Linears{true, true, true, true}},
                                    {"0", Fp8Linears{false, false, false, false}},
                                    {"gate_up", Fp8Linears{false, false, true, false}},
                                    {" qkv , down", Fp8Linears{true, false, false, true}},
                                    {"", Fp8Linears{false, false, false, false}}}) {
    BackendOptions o;
    o.cuda.fp8_fast_accum = {false, true, false, false};  // replaced whole, not merged
    ASSERT_TRUE(ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_FP8_FAST_ACCUM", value}})).ok())
        << value;
    EXPECT_TRUE(o.cuda.fp8_fast_accum == want) << "'" << value << "'";
  }
  // The layers' list form is RANKD_CUDA_FP8_LINEARS' alone: 0 and 1 are not layers there.
  BackendOptions o;
  const absl::Status s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_FP8_LINEARS", "1"}}));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("RANKD_CUDA_FP8_LINEARS: '1' is not a linear layer"));
}

TEST(ApplyBackendEnvironmentTest, BadValuesNameTheVariable) {
  BackendOptions o;
  absl::Status s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_GRAPHS", "off"}}));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("RANKD_CUDA_GRAPHS: 'off' is not 0 or 1"));
  s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_GEMM_CANDIDATES", "eight"}}));
  EXPECT_THAT(std::string(s.message()), HasSubstr("RANKD_CUDA_GEMM_CANDIDATES: 'eight'"));
  s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_OWN_GEMM", "yes"}}));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("RANKD_CUDA_OWN_GEMM: 'yes' is not 0, 1 or auto"));
  s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_OWN_GEMM_VARIANTS", "some"}}));
  EXPECT_THAT(
      std::string(s.message()),
      HasSubstr("RANKD_CUDA_OWN_GEMM_VARIANTS: 'some' is not pingpong, pingpong128 or all"));
  s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_PROFILE_SKIP", "-1"}}));
  EXPECT_THAT(std::string(s.message()), HasSubstr("RANKD_CUDA_PROFILE_SKIP"));
  s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_FP8_LINEARS", "qkv,attention"}}));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("RANKD_CUDA_FP8_LINEARS: 'attention' is not a linear layer"));
  s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_FP8_FAST_ACCUM", "yes"}}));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("RANKD_CUDA_FP8_FAST_ACCUM: 'yes' is not 0, 1 or a linear layer"));
  // 0 would be auto's value: only "auto" spells it.
  for (const char* v : {"0", "4", "two", "2 ", "-1", "Auto", ""}) {
    s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_ATTENTION_WARPGROUPS", v}}));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << v;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("RANKD_CUDA_ATTENTION_WARPGROUPS: '", v,
                                       "' is not auto, 1, 2 or 3")));
  }
  for (const char* v : {"2", "yes", "Auto", ""}) {
    s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_ATTENTION_OVERLAP", v}}));
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << v;
    EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("RANKD_CUDA_ATTENTION_OVERLAP: '",
                                                                 v, "' is not 0, 1 or auto")));
  }
  s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_ATTENTION_FOUR_BLOCKS", "4"}}));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("RANKD_CUDA_ATTENTION_FOUR_BLOCKS: '4' is not 0 or 1"));
  s = ApplyBackendEnvironment(&o, Env({{"RANKD_CUDA_ATTENTION_PREFETCH", "on"}}));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("RANKD_CUDA_ATTENTION_PREFETCH: 'on' is not 0 or 1"));
  BackendOptions automatic;
  ASSERT_TRUE(
      ApplyBackendEnvironment(&automatic, Env({{"RANKD_CUDA_ATTENTION_WARPGROUPS", "auto"}})).ok());
  EXPECT_EQ(automatic.cuda.attention_warpgroups,
            BackendOptions::CudaSwitches::kAttentionWarpgroupsAuto);
  ASSERT_TRUE(
      ApplyBackendEnvironment(&automatic, Env({{"RANKD_CUDA_ATTENTION_OVERLAP", "auto"}})).ok());
  EXPECT_EQ(automatic.cuda.attention_overlap, BackendOptions::CudaSwitches::kAttentionOverlapAuto);
}

TEST(CreateBackendTest, KnowsTheBuiltInKinds) {
  BackendOptions o;
  o.kind = "tpu";
  auto b = CreateBackend(o, rankd::testing::ModelDir("llama-cls"), HeadSpec{});
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(b.status()));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("'tpu' is unknown"));
  o.kind = "cpu";
  o.threads = 1;
  b = CreateBackend(o, rankd::testing::ModelDir("llama-cls"), HeadSpec{});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "cpu");
}

}  // namespace
}  // namespace rankd::backend
