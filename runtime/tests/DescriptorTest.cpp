//===- DescriptorTest.cpp - Descriptor parsing and its errors -------------===//

#include "TestUtil.h"

#include "src/Descriptor.h"

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

struct BadDescriptor {
  const char *text;
  const char *error;
};

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
        BadDescriptor{"ztrain-descriptor 1\nparam w f16 1 2 init zeros 0\n",
                      "descriptor line 2: unknown dtype 'f16'"},
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
        BadDescriptor{"ztrain-descriptor 1\nbuffer x f32 1 2\n",
                      "descriptor line 2: unknown record kind 'buffer'"}));
