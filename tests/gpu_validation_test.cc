// The validation layer behind UF_GPU_VALIDATE (src/gpu/vk_validation.cc), which ctest turns on
// for every GPU test where the Khronos layer is installed (CMakeLists.txt; tools/dev.sh installs
// it). Lavapipe runs a command buffer's dispatches one after another, so a missing barrier gives
// the right numbers there and wrong ones on a GPU; synchronization validation is what sees it
// here. These tests show the layer does: a dependent pair of dispatches recorded as a group (no
// barrier) is reported, the same pair with the recorder's barrier is not, and a request for the
// layer where the loader cannot find it is a clear error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#if UF_HAVE_VULKAN
#include "gpu/vk_context.h"
#include "gpu/vk_kernels.h"
#include "gpu/vk_validation.h"
#include "scoped_env.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuValidation, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

// y += x, then x += y: the second reads what the first wrote. With `grouped` the two are
// recorded as independent (no barrier between them), which they are not.
void RecordDependentPair(Context* ctx, const Kernels& k, bool grouped) {
  const int64_t n = 256;
  auto x = ctx->CreateBuffer(n * 4, Memory::kDevice);
  auto y = ctx->CreateBuffer(n * 4, Memory::kDevice);
  ASSERT_TRUE(x.ok() && y.ok());
  const std::vector<float> ones(n, 1.0f);
  ASSERT_TRUE(ctx->Upload(*x, 0, ones.data(), n * 4).ok());
  ASSERT_TRUE(ctx->Upload(*y, 0, ones.data(), n * 4).ok());
  Recorder r(ctx);
  if (grouped) r.BeginGroup();
  k.Add(&r, *x, 0, *y, 0, n);
  k.Add(&r, *y, 0, *x, 0, n);
  if (grouped) r.EndGroup();
  ASSERT_TRUE(r.Finish().ok());
  ASSERT_TRUE(r.Run().ok());
}

TEST(GpuValidation, ReportsAMissingBarrierAndNothingElse) {
  // "log": errors are counted and the run goes on (ctest's "on" would end this process).
  ScopedEnv env("UF_GPU_VALIDATE", "log");
  auto ctx = Context::Create(-1);
  if (!ctx.ok()) {
    if (ctx.status().ToString().find("vulkan-validationlayers") != std::string::npos) {
      GTEST_SKIP() << ctx.status().ToString();
    }
    GTEST_SKIP() << "no usable Vulkan device: " << ctx.status().ToString();
  }
  auto k = Kernels::Create(ctx->get());
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const int64_t before = ValidationErrors();
  RecordDependentPair(ctx->get(), *k, /*grouped=*/false);
  EXPECT_EQ(ValidationErrors(), before) << "a barrier between the two dispatches was reported";
  RecordDependentPair(ctx->get(), *k, /*grouped=*/true);
  EXPECT_GT(ValidationErrors(), before) << "the read-after-write without a barrier was not seen";
}

TEST(GpuValidation, AMissingLayerIsAClearError) {
  ScopedEnv env("UF_GPU_VALIDATE", "on");
  // The loader (1.3.234 and newer) hides the layer from enumeration and from the instance.
  ScopedEnv hide("VK_LOADER_LAYERS_DISABLE", "VK_LAYER_KHRONOS_validation");
  auto ctx = Context::Create(-1);
  ASSERT_FALSE(ctx.ok()) << "UF_GPU_VALIDATE=on ran without the layer";
  const std::string error = ctx.status().ToString();
  if (error.find("cannot load the Vulkan loader") != std::string::npos) GTEST_SKIP() << error;
  EXPECT_NE(error.find("VK_LAYER_KHRONOS_validation"), std::string::npos) << error;
  EXPECT_NE(error.find("vulkan-validationlayers"), std::string::npos) << error;
}

// UF_GPU_POISON: a new buffer holds the NaN pattern, so a kernel that reads memory nothing wrote
// gets NaNs here as it would get old data on a GPU. Unset, it follows UF_GPU_VALIDATE.
class GpuPoison : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuPoison, FillsNewBuffers) {
  ScopedEnv poison("UF_GPU_POISON", GetParam());
  auto ctx = Context::Create(-1);
  if (!ctx.ok()) GTEST_SKIP() << "no usable Vulkan device: " << ctx.status().ToString();
  ASSERT_TRUE((*ctx)->poisons());
  for (const Memory memory : {Memory::kDevice, Memory::kHost}) {
    auto b = (*ctx)->CreateBuffer(1000, memory);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    std::vector<uint32_t> words(b->size() / 4, 0);
    ASSERT_TRUE((*ctx)->Download(*b, 0, words.data(), b->size()).ok());
    for (size_t i = 0; i < words.size(); ++i) {
      ASSERT_EQ(words[i], 0x7FC07FC0u)
          << "word " << i << (memory == Memory::kHost ? " (host)" : "");
    }
  }
}

// "on" writes memory the host can map through a map (all of lavapipe's); "fill" takes the
// device's vkCmdFillBuffer, a GPU's path for device-local memory.
INSTANTIATE_TEST_SUITE_P(Ways, GpuPoison, ::testing::Values("on", "fill"));

TEST(GpuValidation, PoisonFollowsValidation) {
  ScopedEnv unset("UF_GPU_POISON", "");
  {
    ScopedEnv off("UF_GPU_VALIDATE", "off");
    auto ctx = Context::Create(-1);
    if (!ctx.ok()) GTEST_SKIP() << "no usable Vulkan device: " << ctx.status().ToString();
    EXPECT_FALSE((*ctx)->poisons());
  }
  ScopedEnv log("UF_GPU_VALIDATE", "log");
  auto ctx = Context::Create(-1);
  if (!ctx.ok()) GTEST_SKIP() << ctx.status().ToString();  // the layer missing
  EXPECT_TRUE((*ctx)->poisons());
  ScopedEnv off("UF_GPU_POISON", "off");
  auto plain = Context::Create(-1);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE((*plain)->poisons());
}

#endif

}  // namespace
}  // namespace uf::gpu
