//===- Main.cpp - main() of every compiled model --------------------------===//
//
// Part of ztrain's runtime (libztrt_main). The model object supplies the two
// symbols below; the rest is the driver in libztrt.
//
//===----------------------------------------------------------------------===//

#include "ztrt.h"

#include "src/Driver.h"

extern "C" const char ztrain_descriptor[];
extern "C" void ztrain_step(ztrt_ctx *ctx);

int main(int argc, char **argv) {
  return ztrt::runMain(argc, argv, ztrain_descriptor, ztrain_step);
}
