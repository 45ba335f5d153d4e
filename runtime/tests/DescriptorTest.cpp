//===- DescriptorTest.cpp - Descriptor parsing and its errors -------------===//

#include "TestUtil.h"

#include "step/Descriptor.h"

#include <cstring>

using namespace ztrt;

TEST(DescriptorTest, ParsesAllRecordKinds) {
  Descriptor d =
      parseDescriptor("ztrain-descriptor 1\n"
                      "param fc.weight f32 2 4 3 init normal 0.02\n"
                      "param fc.bias f32 1 4 init zeros 0\n"
                      "state fc.weight.exp_avg f32 2 4 3 of fc.weight\n"
                      "input x f32 2 8 3 bound 0\n"
                      "input y i32 1 8 bound 10\n"
                      "input scalar f32 0 bound 0\n"
                      "optimizer adamw lr=0.001 betas=(0.9, 0.999)\n");
  ASSERT_EQ(d.params.size(), 2u);
  EXPECT_EQ(d.params[0].name, "fc.weight");
  EXPECT_EQ(d.params[0].shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(d.params[0].init, InitKind::Normal);
  EXPECT_DOUBLE_EQ(d.params[0].scale, 0.02);
  EXPECT_EQ(d.params[0].bytes, 48);
  EXPECT_EQ(d.params[1].init, InitKind::Zeros);
  ASSERT_EQ(d.states.size(), 1u);
  EXPECT_EQ(d.states[0].paramIndex, 0);
  ASSERT_EQ(d.inputs.size(), 3u);
  EXPECT_EQ(d.inputs[1].type, ElemType::I32);
  EXPECT_EQ(d.inputs[1].bound, 10);
  EXPECT_EQ(d.inputs[2].shape.size(), 0u);
  EXPECT_EQ(d.inputs[2].numel, 1);
  EXPECT_EQ(d.optimizer, "adamw lr=0.001 betas=(0.9, 0.999)");
}

TEST(DescriptorTest, WithoutStoreSuffixARankStoresTheWholeTensor) {
  Descriptor d = parseDescriptor("ztrain-descriptor 1\n"
                                 "param w f32 2 4 3 init zeros 0\n"
                                 "state m f32 2 4 3 of w\n");
  for (const StoredTensorSpec *spec :
       {static_cast<const StoredTensorSpec *>(&d.params[0]),
        static_cast<const StoredTensorSpec *>(&d.states[0])}) {
    EXPECT_EQ(spec->store, StoreMode::Full);
    EXPECT_EQ(spec->storeElems, 12);
    EXPECT_EQ(spec->storeBytes, 48);
    EXPECT_EQ(spec->slice(3).begin, 0);
    EXPECT_EQ(spec->slice(3).count, 12);
  }
}

TEST(DescriptorTest, ParsesStoreSuffixes) {
  // ZeRO-2 on 4 ranks for a 7-element tensor: the parameter is full but
  // padded to 4 * ceil(7/4) = 8, its state is sharded 2 per rank.
  Descriptor d = parseDescriptor("ztrain-descriptor 1\n"
                                 "param w f32 1 7 init normal 1 store 8 full\n"
                                 "state m f32 1 7 of w store 2 shard\n"
                                 "grid 4\n");
  const ParamSpec &w = d.params[0];
  EXPECT_EQ(w.store, StoreMode::Full);
  EXPECT_EQ(w.storeElems, 8);
  EXPECT_EQ(w.storeBytes, 32);
  EXPECT_EQ(w.bytes, 28); // The tensor itself, as saved.
  EXPECT_EQ(w.slice(2).begin, 0);
  EXPECT_EQ(w.slice(2).count, 7);
  const StateSpec &m = d.states[0];
  EXPECT_EQ(m.store, StoreMode::Shard);
  EXPECT_EQ(m.storeElems, 2);
  EXPECT_EQ(m.storeBytes, 8);
  // Rank r holds [2r, 2r + 2) of 7: the last rank one element and padding.
  const int64_t begins[4] = {0, 2, 4, 6}, counts[4] = {2, 2, 2, 1};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(m.slice(r).begin, begins[r]) << "rank " << r;
    EXPECT_EQ(m.slice(r).count, counts[r]) << "rank " << r;
  }
}

TEST(DescriptorTest, ShardsPastTheEndHoldOnlyPadding) {
  // 3 elements in shards of 2 on 4 ranks: rank 2 and 3 store padding only,
  // and a huge rank must not overflow rank * E.
  Descriptor d = parseDescriptor("ztrain-descriptor 1\n"
                                 "param w f32 1 3 init ones 0 store 2 shard\n"
                                 "grid 4\n");
  const ParamSpec &w = d.params[0];
  EXPECT_EQ(w.slice(1).begin, 2);
  EXPECT_EQ(w.slice(1).count, 1);
  for (int64_t r : {int64_t(2), int64_t(3), int64_t(1) << 62})
    EXPECT_EQ(w.slice(r).count, 0) << "rank " << r;
}

TEST(DescriptorTest, ShardsAreCheckedAgainstTheWorldWithoutAGrid) {
  Descriptor d = parseDescriptor("ztrain-descriptor 1\n"
                                 "param w f32 1 7 init zeros 0\n"
                                 "state m f32 1 7 of w store 2 shard\n");
  checkStorage(d, 4); // 2 * 4 >= 7: fits.
  EXPECT_EXIT(checkStorage(d, 3), ::testing::ExitedWithCode(1),
              "^ztrain: error: descriptor: state 'm' has 7 elements, but "
              "shards of 2 on 3 ranks hold only 6\n$");
}

TEST(DescriptorTest, ParsesMixedPrecisionRecords) {
  Descriptor d = parseDescriptor(
      "ztrain-descriptor 1\n"
      "grid 2\n"
      "param w bf16 2 3 5 init normal 0.5 store 8 shard\n"
      "param b f16 1 5 init zeros 0\n"
      "param c f32 1 3 init ones 0\n"
      "grad w 8 f32\n"
      "grad b 5 f16\n"
      "grad c 3\n"
      "state w.master f32 2 3 5 of w master store 8 shard\n"
      "state w.exp_avg f32 2 3 5 of w store 8 shard\n"
      "state b.master f32 1 5 of b master\n"
      "host_step_buffer 4096\n");
  ASSERT_EQ(d.params.size(), 3u);
  EXPECT_EQ(d.params[0].type, ElemType::BF16);
  EXPECT_EQ(d.params[1].type, ElemType::F16);
  // Memory accounting is exact: 2-byte elements.
  EXPECT_EQ(d.params[0].bytes, 15 * 2);
  EXPECT_EQ(d.params[0].storeBytes, 8 * 2);
  EXPECT_EQ(d.params[1].storeBytes, 5 * 2);
  EXPECT_EQ(d.params[0].masterIndex, 0);
  EXPECT_EQ(d.params[1].masterIndex, 2);
  EXPECT_EQ(d.params[2].masterIndex, -1);
  ASSERT_EQ(d.states.size(), 3u);
  EXPECT_TRUE(d.states[0].master);
  EXPECT_FALSE(d.states[1].master);
  EXPECT_TRUE(d.states[2].master);
  EXPECT_EQ(d.states[0].store, StoreMode::Shard);
  EXPECT_EQ(d.states[0].storeBytes, 8 * 4);
  ASSERT_EQ(d.grads.size(), 3u);
  EXPECT_EQ(d.grads[0].type, ElemType::F32);
  EXPECT_EQ(d.grads[0].bytes(), 8 * 4);
  EXPECT_EQ(d.grads[1].type, ElemType::F16);
  EXPECT_EQ(d.grads[1].bytes(), 5 * 2);
  // The pinned buffer a device backend's host steps stage through.
  EXPECT_EQ(d.hostStepBuffer, 4096);
  // Absent: the parameter's own type.
  EXPECT_EQ(d.grads[2].type, ElemType::F32);
  PlannedBytes planned = plannedBytes(d);
  // params 16 + 10 + 12, grads 32 + 10 + 12, states 32 + 32 + 20.
  EXPECT_EQ(planned.modelStates, 16 + 10 + 12 + 32 + 10 + 12 + 32 + 32 + 20);
}

TEST(DescriptorTest, GradientDefaultsToTheParametersType) {
  Descriptor d = parseDescriptor("ztrain-descriptor 1\n"
                                 "param w bf16 1 4 init zeros 0\n"
                                 "grad w 4\n");
  EXPECT_EQ(d.grads[0].type, ElemType::BF16);
  EXPECT_EQ(d.grads[0].bytes(), 8);
}

TEST(DescriptorTest, ElementTypeNamesAndConversions) {
  const ElemType all[] = {ElemType::F32, ElemType::I32, ElemType::BF16,
                          ElemType::F16};
  const char *names[] = {"f32", "i32", "bf16", "f16"};
  const char *st[] = {"F32", "I32", "BF16", "F16"};
  const int64_t bytes[] = {4, 4, 2, 2};
  for (int i = 0; i < 4; ++i) {
    EXPECT_STREQ(elemTypeName(all[i]), names[i]);
    EXPECT_STREQ(elemTypeSafetensorsName(all[i]), st[i]);
    EXPECT_EQ(elemTypeBytes(all[i]), bytes[i]);
    ElemType back = ElemType::I32;
    ASSERT_TRUE(elemTypeFromSafetensorsName(st[i], &back));
    EXPECT_EQ(back, all[i]);
  }
  ElemType none;
  EXPECT_FALSE(elemTypeFromSafetensorsName("F64", &none));
  // 1 + 2^-8 is a tie between two bf16 values (1 and 1 + 2^-7): rounds to
  // even, 1; 1 + 2^-7 is exact. Both exact in f16 (10 mantissa bits).
  const float in[3] = {1.0f + 0x1p-8f, 1.0f + 0x1p-7f, -2.5f};
  uint16_t out[3];
  EXPECT_EQ(convertElements(ElemType::F32, in, ElemType::BF16, out, 3), 1);
  EXPECT_EQ(out[0], 0x3f80); // 1.0
  EXPECT_EQ(out[1], 0x3f81);
  EXPECT_EQ(out[2], 0xc020);
  EXPECT_EQ(convertElements(ElemType::F32, in, ElemType::F16, out, 3), 0);
  float wide[3];
  // Widening is exact, so nothing changes.
  EXPECT_EQ(convertElements(ElemType::F16, out, ElemType::F32, wide, 3), 0);
  EXPECT_EQ(std::memcmp(wide, in, sizeof(in)), 0);
}

struct BadDescriptor {
  const char *text;
  const char *error;
};

TEST(DescriptorTest, ParsesFrozenParameters) {
  Descriptor d = parseDescriptor("ztrain-descriptor 1\n"
                                 "grid 2\n"
                                 "param e bf16 2 4 2 init normal 0.5 store 4 "
                                 "shard space host frozen\n"
                                 "param w f32 1 3 init zeros 0 store 4 full\n"
                                 "grad e 0 bf16\n"
                                 "grad w 4 f32\n");
  EXPECT_TRUE(d.params[0].frozen);
  EXPECT_EQ(d.params[0].space, MemorySpace::Host);
  EXPECT_EQ(d.params[0].store, StoreMode::Shard);
  EXPECT_FALSE(d.params[1].frozen);
  EXPECT_EQ(d.grads[0].elements, 0);
}

TEST(DescriptorTest, InputMayAllowAnIgnoredLabel) {
  Descriptor d = parseDescriptor("ztrain-descriptor 1\n"
                                 "input y i32 1 4 bound 10 ignore -100\n"
                                 "input ids i32 1 4 bound 10\n");
  EXPECT_TRUE(d.inputs[0].hasIgnore);
  EXPECT_EQ(d.inputs[0].ignore, -100);
  EXPECT_TRUE(d.inputs[0].allows(-100));
  EXPECT_TRUE(d.inputs[0].allows(9));
  EXPECT_FALSE(d.inputs[0].allows(10));
  EXPECT_FALSE(d.inputs[0].allows(-1));
  EXPECT_FALSE(d.inputs[1].allows(-100));
  EXPECT_EXIT(parseDescriptor("ztrain-descriptor 1\n"
                              "input y i32 1 4 bound 10 ignore 4294967296\n"),
              ::testing::ExitedWithCode(1),
              "descriptor line 2: bad ignored label '4294967296'");
}

void PrintTo(const BadDescriptor &d, std::ostream *os) { *os << d.error; }

class DescriptorErrorTest : public ::testing::TestWithParam<BadDescriptor> {};

TEST_P(DescriptorErrorTest, NamesLineAndProblem) {
  EXPECT_EXIT(parseDescriptor(GetParam().text), ::testing::ExitedWithCode(1),
              std::string("^ztrain: error: ") + GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(
    Errors, DescriptorErrorTest,
    ::testing::Values(
        BadDescriptor{"", "descriptor: empty"},
        BadDescriptor{"param w f32 1 2 init zeros 0\n",
                      "descriptor line 1: expected 'ztrain-descriptor 1'"},
        BadDescriptor{"ztrain-descriptor 2\n",
                      "descriptor line 1: unsupported descriptor version"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f64 1 2 init zeros 0\n",
                      "descriptor line 2: unknown dtype 'f64' \\(expected "
                      "f32, bf16, f16 or i32\\)"},
        // 16-bit types hold parameters, states and gradients only.
        BadDescriptor{"ztrain-descriptor 1\ninput x bf16 1 2 bound 0\n",
                      "descriptor line 2: unknown dtype 'bf16' \\(expected "
                      "f32 or i32\\)"},
        BadDescriptor{"ztrain-descriptor 1\nbuffer b f16 1 2 init zeros 0\n",
                      "descriptor line 2: unknown dtype 'f16'"},
        BadDescriptor{"ztrain-descriptor 1\nparam w bf16 1 2 init zeros 0\n"
                      "state w.master bf16 1 2 of w master\n",
                      "descriptor line 3: master state 'w.master' must be "
                      "f32, not bf16"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f32 1 2 init zeros 0\n"
                      "state w.master f32 1 2 of w master\n",
                      "descriptor line 3: master state 'w.master' is of f32 "
                      "parameter 'w' \\(masters belong to bf16 or f16 "
                      "parameters\\)"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f16 1 2 init zeros 0\n"
                      "state w.master f32 1 3 of w master\n",
                      "descriptor line 3: master state 'w.master' has shape "
                      "\\[3\\], its parameter 'w' \\[2\\]"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f16 1 2 init zeros 0\n"
                      "state a f32 1 2 of w master\n"
                      "state b f32 1 2 of w master\n",
                      "descriptor line 4: parameter 'w' has a second master "
                      "state 'b'"},
        BadDescriptor{"ztrain-descriptor 1\nparam w bf16 1 2 init zeros 0\n"
                      "state m f32 1 2 of w store 2 full master\n",
                      "descriptor line 3: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f32 1 2 init zeros 0 "
                      "frozen\nstate w.m f32 1 2 of w\n",
                      "descriptor line 3: state 'w.m' is of frozen parameter "
                      "'w' \\(frozen parameters are not trained\\)"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f32 1 2 init zeros 0 "
                      "frozen frozen\n",
                      "descriptor line 2: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\nparam w bf16 1 2 init zeros 0\n"
                      "grad w 2 i32\n",
                      "descriptor line 3: gradient of 'w' cannot be i32"},
        BadDescriptor{"ztrain-descriptor 1\nparam w bf16 1 2 init zeros 0\n"
                      "grad w 2 f64\n",
                      "descriptor line 3: unknown dtype 'f64'"},
        BadDescriptor{"ztrain-descriptor 1\nparam w bf16 1 2 init zeros 0\n"
                      "grad w 2 f32 x\n",
                      "descriptor line 3: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\nhost_step_buffer 0\n",
                      "descriptor line 2: host step buffer bytes must be "
                      ">= 1"},
        BadDescriptor{"ztrain-descriptor 1\nhost_step_buffer 64\n"
                      "host_step_buffer 64\n",
                      "descriptor line 3: second host_step_buffer record"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f32 2 2 init zeros 0\n",
                      "descriptor line 2: bad dimension 'init'"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f32 1 2 init xavier 1\n",
                      "descriptor line 2: unknown init kind 'xavier'"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f32 1 2 init normal\n",
                      "descriptor line 2: missing init scale"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f32 1 2 init zeros 0 7\n",
                      "descriptor line 2: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\nstate m f32 1 2 of w\n",
                      "descriptor line 2: state 'm' is of unknown parameter "
                      "'w'"},
        BadDescriptor{"ztrain-descriptor 1\ninput x f32 1 2 bound 0\n"
                      "input x f32 1 2 bound 0\n",
                      "descriptor line 3: duplicate name 'x'"},
        BadDescriptor{"ztrain-descriptor 1\ninput x f32 1 2 bound 5\n",
                      "descriptor line 2: f32 input 'x' cannot have a bound"},
        BadDescriptor{"ztrain-descriptor 1\ninput x  f32 1 2 bound 0\n",
                      "descriptor line 2: empty dtype"},
        BadDescriptor{"ztrain-descriptor 1\ntable x f32 1 2\n",
                      "descriptor line 2: unknown record kind 'table'"},
        BadDescriptor{"ztrain-descriptor 1\nbuffer x f32 1 2\n",
                      "descriptor line 2: missing init"},
        BadDescriptor{"ztrain-descriptor 1\nbuffer x i32 1 2 init normal 1\n",
                      "descriptor line 2: i32 buffer 'x' cannot have a random "
                      "init"},
        BadDescriptor{"ztrain-descriptor 1\nbuffer x i32 1 2 init causal 0\n",
                      "descriptor line 2: buffer 'x' with init causal needs "
                      "rank >= 2"},
        BadDescriptor{"ztrain-descriptor 1\nparam w f32 2 2 2 init causal 0\n",
                      "descriptor line 2: unknown init kind 'causal' .expected "
                      "zeros, ones, normal or uniform.: "},
        BadDescriptor{"ztrain-descriptor 1\nbuffer x f32 2 2 2 init ones 0 "
                      "store 8 full\n",
                      "descriptor line 2: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\n"
                      "param w f32 1 7 init zeros 0 store 6 full\n",
                      "descriptor line 2: full storage of 'w' has 6 elements, "
                      "fewer than its 7"},
        // The grid may come before or after the records it constrains.
        BadDescriptor{"ztrain-descriptor 1\ngrid 2\n"
                      "param w f32 1 7 init zeros 0 store 3 shard\n",
                      "descriptor line 3: param 'w' has 7 elements, but "
                      "shards of 3 on 2 ranks hold only 6"},
        BadDescriptor{"ztrain-descriptor 1\n"
                      "param w f32 1 7 init zeros 0\n"
                      "state m f32 1 7 of w store 1 shard\ngrid 4\n",
                      "descriptor line 3: state 'm' has 7 elements, but "
                      "shards of 1 on 4 ranks hold only 4"},
        BadDescriptor{"ztrain-descriptor 1\n"
                      "param w f32 1 7 init zeros 0 store 8 split\n",
                      "descriptor line 2: unknown storage mode 'split' "
                      "\\(expected full or shard\\)"},
        BadDescriptor{"ztrain-descriptor 1\n"
                      "param w f32 1 7 init zeros 0 store full\n",
                      "descriptor line 2: bad storage size 'full'"},
        BadDescriptor{"ztrain-descriptor 1\n"
                      "param w f32 1 7 init zeros 0 store\n",
                      "descriptor line 2: missing storage size"},
        BadDescriptor{"ztrain-descriptor 1\n"
                      "param w f32 1 7 init zeros 0 store 8\n",
                      "descriptor line 2: missing storage mode"},
        BadDescriptor{"ztrain-descriptor 1\n"
                      "param w f32 1 7 init zeros 0 store 8 full 1\n",
                      "descriptor line 2: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\n"
                      "param w f32 1 7 init zeros 0 keep 8 full\n",
                      "descriptor line 2: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\ngrad_accum 0\n",
                      "descriptor line 2: micro-batches per step must be "
                      ">= 1"},
        BadDescriptor{"ztrain-descriptor 1\ngrad_accum 2\ngrad_accum 2\n",
                      "descriptor line 3: second grad_accum record"},
        BadDescriptor{"ztrain-descriptor 1\nfused 0\n",
                      "descriptor line 2: fused kernel count must be >= 1"},
        BadDescriptor{"ztrain-descriptor 1\nfused -2\n",
                      "descriptor line 2: bad fused kernel count '-2'"},
        BadDescriptor{"ztrain-descriptor 1\nfused\n",
                      "descriptor line 2: missing fused kernel count"},
        BadDescriptor{"ztrain-descriptor 1\nfused 2 kernels\n",
                      "descriptor line 2: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\nfused 3\nfused 3\n",
                      "descriptor line 3: second fused record"}));

TEST(DescriptorTest, GradAccumRecord) {
  EXPECT_EQ(parseDescriptor("ztrain-descriptor 1\n").gradAccumSteps, 0);
  EXPECT_EQ(parseDescriptor("ztrain-descriptor 1\ngrad_accum 8\n")
                .gradAccumSteps,
            8);
}

TEST(DescriptorTest, FusedRecordCountsTheGeneratedKernels) {
  EXPECT_EQ(parseDescriptor("ztrain-descriptor 1\n").fusedKernels, 0);
  EXPECT_EQ(parseDescriptor("ztrain-descriptor 1\n"
                            "param w f32 1 4 init zeros 0\n"
                            "fused 3\n")
                .fusedKernels,
            3);
}

TEST(DescriptorTest, MeshRecordLaysOutTheGrid) {
  // Without the record: no mesh (shard = the world, replicate 1).
  Descriptor flat = parseDescriptor("ztrain-descriptor 1\ngrid 4\n");
  EXPECT_FALSE(flat.hasMesh);
  EXPECT_EQ(flat.shardRanks(4), 4);
  EXPECT_EQ(flat.meshReplicate, 1);
  EXPECT_EQ(flat.meshRanksPerNode, 0);
  // 8 ranks as 4 replicate groups of 2; shards split over the 2 ranks of a
  // shard group: ceil(7 / 2) = 4 elements each, not ceil(7 / 8) = 1. The
  // mesh may come before the grid.
  Descriptor d = parseDescriptor("ztrain-descriptor 1\n"
                                 "mesh 2 4 4\n"
                                 "param w f32 1 7 init zeros 0 store 4 shard\n"
                                 "grid 8\n");
  EXPECT_TRUE(d.hasMesh);
  EXPECT_EQ(d.meshShard, 2);
  EXPECT_EQ(d.meshReplicate, 4);
  EXPECT_EQ(d.meshRanksPerNode, 4);
  EXPECT_EQ(d.shardRanks(8), 2);
  checkStorage(d, 8); // 4 * 2 >= 7: fits on the mesh's shards.
  // Shards of 1 would cover 7 elements on 8 flat ranks, not on 2 shards.
  EXPECT_EXIT(parseDescriptor("ztrain-descriptor 1\ngrid 8\nmesh 2 4 4\n"
                              "param w f32 1 7 init zeros 0 store 1 shard\n"),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: descriptor line 4: param 'w' has 7 elements, "
              "but shards of 1 on 2 ranks hold only 2: 'param w f32 1 7 init "
              "zeros 0 store 1 shard'\n$");
  // ZeRO++'s hpZ ("secondary"): the groups carry its backward gathers, the
  // shards stay split over all 8 ranks (ceil(7 / 8) = 1 element each).
  Descriptor hpz = parseDescriptor("ztrain-descriptor 1\ngrid 8\n"
                                   "mesh 2 4 2 secondary\n"
                                   "param w f32 1 7 init zeros 0 store 1 "
                                   "shard\n");
  EXPECT_TRUE(hpz.hasMesh);
  EXPECT_TRUE(hpz.meshSecondary);
  EXPECT_EQ(hpz.shardRanks(8), 8);
  EXPECT_FALSE(d.meshSecondary);
}

INSTANTIATE_TEST_SUITE_P(
    MeshErrors, DescriptorErrorTest,
    ::testing::Values(
        BadDescriptor{"ztrain-descriptor 1\ngrid 4\nmesh 2 3 2\n",
                      "descriptor line 3: mesh of 2 shard x 3 replicate "
                      "ranks is 6 ranks, the grid has 4: 'mesh 2 3 2'\n$"},
        BadDescriptor{"ztrain-descriptor 1\nmesh 2 2 2\n",
                      "descriptor line 2: a mesh record needs a grid record"},
        BadDescriptor{"ztrain-descriptor 1\ngrid 4\nmesh 0 4 2\n",
                      "descriptor line 3: mesh shard and replicate sizes "
                      "must be >= 1"},
        BadDescriptor{"ztrain-descriptor 1\ngrid 4\nmesh 4 0 2\n",
                      "descriptor line 3: mesh shard and replicate sizes "
                      "must be >= 1"},
        BadDescriptor{"ztrain-descriptor 1\ngrid 4\nmesh 2 2 0\n",
                      "descriptor line 3: mesh ranks per node must be >= 1"},
        BadDescriptor{"ztrain-descriptor 1\ngrid 4\nmesh 2 2\n",
                      "descriptor line 3: missing mesh ranks per node"},
        BadDescriptor{"ztrain-descriptor 1\ngrid 4\nmesh 2 2 2 1\n",
                      "descriptor line 3: unexpected trailing fields"},
        BadDescriptor{"ztrain-descriptor 1\ngrid 4\nmesh 2 -2 2\n",
                      "descriptor line 3: bad mesh replicate size '-2'"},
        BadDescriptor{"ztrain-descriptor 1\ngrid 4\nmesh 2 2 2\nmesh 2 2 2\n",
                      "descriptor line 4: second mesh record"}));
