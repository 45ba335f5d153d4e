//===- Main.cpp - main() of every compiled model --------------------------===//
//
// Part of ztrain's runtime (libztrt_main). The model object supplies the two
// symbols below; the rest is the driver in libztrt.
//
//===----------------------------------------------------------------------===//

#include "ztrt.h"

#include "step/Driver.h"

extern "C" const char ztrain_descriptor[];
extern "C" void ztrain_step(ztrt_ctx *ctx);
// Models compiled with evaluation (the descriptor's `eval` record) define
// it; hand-written ones may not.
extern "C" void ztrain_eval(ztrt_ctx *ctx) __attribute__((weak));
// And models whose loss is a cross-entropy of logits (`logits` record).
extern "C" void ztrain_logits(ztrt_ctx *ctx) __attribute__((weak));

int main(int argc, char **argv) {
  return ztrt::runMain(argc, argv, ztrain_descriptor, ztrain_step,
                       ztrain_eval, ztrain_logits);
}
