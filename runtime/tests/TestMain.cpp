//===- TestMain.cpp - gtest main for the runtime tests --------------------===//
//
// Death tests re-execute the binary ("threadsafe" style) instead of forking
// a process that may already hold OpenBLAS / OpenMP worker threads.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

int main(int argc, char **argv) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
