//===- DeepSpeedConfigTest.cpp - the one reader of ds_config.json --------===//
//
// Part of ztrain's runtime tests. ztrain-compile links the same reader;
// test/e2e/test_config.py runs both tools on the same files.
//
//===----------------------------------------------------------------------===//

#include "cli/DeepSpeedConfig.h"

#include <gtest/gtest.h>

using namespace ztrt;

namespace {

DeepSpeedConfig read(const std::string &text) {
  DeepSpeedConfig config;
  std::string error;
  EXPECT_TRUE(parseDeepSpeedConfig(text, config, error)) << error;
  return config;
}

std::string refusal(const std::string &text) {
  DeepSpeedConfig config;
  std::string error;
  EXPECT_FALSE(parseDeepSpeedConfig(text, config, error)) << text;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  return error;
}

std::string flags(const std::vector<DeepSpeedSetting> &settings) {
  std::string out;
  for (const DeepSpeedSetting &s : settings)
    out += s.flag + "=" + s.value + " ";
  return out;
}

} // namespace

TEST(DeepSpeedConfigTest, HpzPartitionSizeIsTheSecondaryPartition) {
  // ZeRO++'s hpZ group; 1 (DeepSpeed's default) is off.
  DeepSpeedConfig c = read(R"({"zero_optimization": {"stage": 3,
      "zero_hpz_partition_size": 8}})");
  EXPECT_EQ(flags(c.compileFlags), "zero-stage=3 zero-hpz-partition-size=8 ");
  DeepSpeedConfig off = read(
      R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 1}})");
  EXPECT_EQ(flags(off.compileFlags), "zero-stage=3 ");
}

TEST(DeepSpeedConfigTest, MicsShardSizeIsHybridSharding) {
  // MiCS's shard group is --dp-shard (the replicas: dp / shard); -1, its
  // default, is off; the hierarchical gather is accepted.
  DeepSpeedConfig c = read(R"({"zero_optimization": {"stage": 3,
      "mics_shard_size": 8, "mics_hierarchical_params_gather": true}})");
  EXPECT_EQ(flags(c.compileFlags), "zero-stage=3 dp-shard=8 ");
  EXPECT_EQ(c.keyOf("dp-shard"), "zero_optimization.mics_shard_size");
  DeepSpeedConfig off = read(
      R"({"zero_optimization": {"stage": 3, "mics_shard_size": -1}})");
  EXPECT_EQ(flags(off.compileFlags), "zero-stage=3 ");
}

TEST(DeepSpeedConfigTest, OneWalkGivesBothToolsTheirParts) {
  DeepSpeedConfig c = read(R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "Adam", "params": {"lr": 3e-3, "betas": [0.8, 0.95],
                                             "eps": 1e-6, "weight_decay": 0.05}},
    "scheduler": {"type": "WarmupCosineLR",
                  "params": {"warmup_num_steps": 2, "total_num_steps": 10}},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e2,
                          "offload_optimizer": {"device": "cpu",
                                                "nvme_path": "/swap"}},
    "bf16": {"enabled": true}, "steps_per_print": 5})");
  // The compiler's flags, in the file's order; bytes from elements once the
  // precision is known (bf16 gradients: 2 bytes each).
  EXPECT_EQ(flags(c.compileFlags),
            "grad-accum-steps=2 optimizer=adamw lr=0.0030000000000000001 "
            "beta1=0.80000000000000004 beta2=0.94999999999999996 "
            "eps=9.9999999999999995e-07 weight-decay=0.050000000000000003 "
            "zero-stage=2 offload-optimizer=cpu precision=bf16 "
            "bucket-bytes=1000 ");
  EXPECT_EQ(c.keyOf("zero-stage"), "zero_optimization.stage");
  EXPECT_EQ(c.microBatch, 4);
  // The executable's: its hyper-parameters, the scheduler's lr where it has
  // a peak (WarmupCosineLR has none: the optimizer's), the schedule with
  // DeepSpeed's defaults (log warmup, cos_min_ratio 0.0001).
  EXPECT_EQ(flags(c.runHypers),
            "--beta1=0.80000000000000004 --beta2=0.94999999999999996 "
            "--eps=9.9999999999999995e-07 --weight-decay=0.050000000000000003 "
            "--lr=0.0030000000000000001 ");
  ASSERT_TRUE(c.schedule);
  EXPECT_EQ(c.schedule->kind, "cosine");
  EXPECT_EQ(c.schedule->warmupSteps, 2);
  EXPECT_EQ(c.schedule->decaySteps, 10);
  EXPECT_TRUE(c.schedule->logWarmup);
  EXPECT_EQ(c.schedule->minLrRatio, 0.0001);
  EXPECT_EQ(c.stepsPerPrint, 5);
  EXPECT_EQ(c.gradAccumSteps, 2);
  EXPECT_EQ(c.nvmePath, "/swap");
  EXPECT_EQ(c.optimizer, "adamw");
  EXPECT_EQ(c.precision, "bf16");
  // Keys only the executable acts on: the compiler notes them.
  EXPECT_EQ(c.forExecutable,
            (std::vector<std::string>{
                "scheduler", "steps_per_print",
                "zero_optimization.offload_optimizer.nvme_path"}));
}

TEST(DeepSpeedConfigTest, TheSchedulersPeakIsTheLr) {
  DeepSpeedConfig c = read(R"({"optimizer": {"type": "SGD",
      "params": {"lr": 0.5, "momentum": 0.9}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.1,
                                                 "warmup_type": "linear"}}})");
  EXPECT_EQ(flags(c.runHypers), "--momentum=0.90000000000000002 "
                                "--lr=0.10000000000000001 ");
  EXPECT_EQ(c.schedule->kind, "constant");
  EXPECT_FALSE(c.schedule->logWarmup);
  // A disabled precision section says the build is fp32.
  EXPECT_EQ(read(R"({"fp16": {"enabled": false}})").precision, "fp32");
  EXPECT_EQ(read(R"({"fp16": {"enabled": "auto"}})").precision, "");
  // "auto" (Hugging Face) is whatever the flags say: no setting.
  EXPECT_TRUE(read(R"({"train_micro_batch_size_per_gpu": "auto",
                       "gradient_clipping": "auto"})")
                  .compileFlags.empty());
}

TEST(DeepSpeedConfigTest, EveryKeyItCannotHonourInOneLine) {
  EXPECT_EQ(refusal(R"({"shceduler": {}, "optimizer": {"type": "Lamb"},
                  "scheduler": {"type": "WarmupLR",
                                "params": {"warmup_type": "exp"}},
                  "zero_optimization": {"stage": -1,
                    "offload_optimizer": {"nvme_path": "/a"},
                    "offload_param": {"nvme_path": "/b"}}})"),
            "keys ztrain cannot honour: optimizer.type=Lamb (ztrain has Adam, "
            "AdamW and SGD); scheduler.params.warmup_type=exp (\"linear\" or "
            "\"log\"); shceduler (unknown; did you mean scheduler?); "
            "zero_optimization.offload_param.nvme_path (differs from "
            "offload_optimizer's: ztrain keeps one swap directory per rank); "
            "zero_optimization.stage (expected an integer >= 0)");
  EXPECT_EQ(refusal(R"({"optimizer": {"params": {"lr": 1, "lr": 2}}})"),
            "not JSON: duplicate key 'optimizer.params.lr' at byte 39");
  EXPECT_EQ(refusal("[1]"), "expected a JSON object");
  EXPECT_EQ(refusal(R"({"gradient_clipping": "big"})"),
            "a key ztrain cannot honour: gradient_clipping (expected a "
            "number)");
  // A number out of range is the flag's to refuse (the compiler's option
  // parser names the flag and the key; the executable checks the same).
  EXPECT_EQ(read(R"({"gradient_clipping": -1})").clip, -1.0);
}
