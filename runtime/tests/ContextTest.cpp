//===- ContextTest.cpp - Byte accounting per memory category --------------===//

#include "TestUtil.h"

#include "ztrt.h"

using namespace ztrt;
using namespace ztrt::test;

TEST(ContextTest, AccountsCurrentAndPeakPerCategory) {
  auto ctx = cpuContext();
  void *p = ztrt_alloc(ctx.get(), 1000, ZTRT_CAT_PARAMETERS);
  void *a1 = ztrt_alloc(ctx.get(), 300, ZTRT_CAT_ACTIVATIONS);
  void *a2 = ztrt_alloc(ctx.get(), 200, ZTRT_CAT_ACTIVATIONS);
  const MemoryStats &m = ctx->memory();
  EXPECT_EQ(m.current[ZTRT_CAT_PARAMETERS], 1000);
  EXPECT_EQ(m.current[ZTRT_CAT_ACTIVATIONS], 500);
  EXPECT_EQ(m.peakTotal, 1500);
  ztrt_free(ctx.get(), a1);
  void *g = ztrt_alloc(ctx.get(), 100, ZTRT_CAT_GRADIENTS);
  // Peak of the total (1500) is not the sum of per-category peaks (1600).
  EXPECT_EQ(m.current[ZTRT_CAT_ACTIVATIONS], 200);
  EXPECT_EQ(m.peak[ZTRT_CAT_ACTIVATIONS], 500);
  EXPECT_EQ(m.peak[ZTRT_CAT_GRADIENTS], 100);
  EXPECT_EQ(m.currentTotal, 1300);
  EXPECT_EQ(m.peakTotal, 1500);
  ztrt_free(ctx.get(), a2);
  ztrt_free(ctx.get(), g);
  ztrt_free(ctx.get(), nullptr); // A no-op, like free(NULL).
  EXPECT_EQ(m.currentTotal, 1000);
  EXPECT_EQ(m.current[ZTRT_CAT_OPTIMIZER_STATES], 0);
  EXPECT_EQ(m.current[ZTRT_CAT_OTHER], 0);
  ztrt_free(ctx.get(), p);
  EXPECT_EQ(m.currentTotal, 0);
}

TEST(ContextTest, ZeroByteAllocationsAreDistinct) {
  auto ctx = cpuContext();
  void *a = ztrt_alloc(ctx.get(), 0, ZTRT_CAT_OTHER);
  void *b = ztrt_alloc(ctx.get(), 0, ZTRT_CAT_OTHER);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
}

TEST(ContextTest, RejectsBadCategoryAndForeignPointers) {
  auto ctx = cpuContext();
  EXPECT_EXIT(ztrt_alloc(ctx.get(), 8, ZTRT_CAT_COUNT),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: alloc: invalid memory category 14\n$");
  int local;
  EXPECT_EXIT(ztrt_free(ctx.get(), &local), ::testing::ExitedWithCode(1),
              "free: pointer .* was not allocated by ztrt_alloc");
  EXPECT_EXIT(ztrt_alloc(ctx.get(), int64_t(1) << 62, ZTRT_CAT_ACTIVATIONS),
              ::testing::ExitedWithCode(1),
              "alloc: out of cpu memory allocating 4611686018427387904 bytes "
              "of activations");
}

TEST(ContextTest, GatheredParametersAreACategoryOfTheirOwn) {
  EXPECT_EQ(ZTRT_CAT_COUNT, 14);
  EXPECT_STREQ(categoryName(ZTRT_CAT_STATE_SWAP_BUFFERS), "state_swap_buffers");
  EXPECT_STREQ(categoryName(ZTRT_CAT_HOST_GRADIENTS), "host_gradients");
  EXPECT_STREQ(categoryName(ZTRT_CAT_HOST_STEP_BUFFERS), "host_step_buffers");
  EXPECT_STREQ(categoryName(ZTRT_CAT_HOST_PARAMETERS), "host_parameters");
  EXPECT_STREQ(categoryName(ZTRT_CAT_GATHERED), "gathered_parameters");
  EXPECT_STREQ(categoryName(ZTRT_CAT_HOST_ACTIVATIONS), "host_activations");
  EXPECT_STREQ(categoryName(ZTRT_CAT_BUFFERS), "buffers");
  EXPECT_STREQ(categoryName(ZTRT_CAT_OTHER), "other");
  EXPECT_STREQ(categoryName(ZTRT_CAT_COUNT), "invalid");
  auto ctx = cpuContext();
  void *w = ztrt_alloc(ctx.get(), 64, ZTRT_CAT_GATHERED);
  EXPECT_EQ(ctx->memory().current[ZTRT_CAT_GATHERED], 64);
  ztrt_free(ctx.get(), w);
  EXPECT_EQ(ctx->memory().current[ZTRT_CAT_GATHERED], 0);
  EXPECT_EQ(ctx->memory().peak[ZTRT_CAT_GATHERED], 64);
  EXPECT_EXIT(ztrt_alloc(ctx.get(), 8, ZTRT_CAT_COUNT),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: alloc: invalid memory category 14\n$");
}

TEST(ContextTest, ArenasPersistAcrossSteps) {
  auto ctx = cpuContext();
  void *a = ztrt_arena(ctx.get(), 0, 256, ZTRT_CAT_ACTIVATIONS);
  void *g = ztrt_arena(ctx.get(), 1, 128, ZTRT_CAT_GATHERED);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(g, nullptr);
  EXPECT_NE(a, g);
  // Later steps get the same blocks and allocate nothing more.
  EXPECT_EQ(ztrt_arena(ctx.get(), 0, 256, ZTRT_CAT_ACTIVATIONS), a);
  EXPECT_EQ(ztrt_arena(ctx.get(), 1, 128, ZTRT_CAT_GATHERED), g);
  EXPECT_EQ(ctx->memory().current[ZTRT_CAT_ACTIVATIONS], 256);
  EXPECT_EQ(ctx->memory().current[ZTRT_CAT_GATHERED], 128);
  EXPECT_EQ(ctx->memory().peakTotal, 384);
  EXPECT_EXIT(ztrt_arena(ctx.get(), 0, 512, ZTRT_CAT_ACTIVATIONS),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: arena: arena 0 was allocated with 256 bytes, "
              "now asked for 512\n$");
  EXPECT_EXIT(ztrt_arena(ctx.get(), 65, 8, ZTRT_CAT_OTHER),
              ::testing::ExitedWithCode(1), "arena: index 65 out of range");
}
