//===- SwapIOTest.cpp - The swap I/O engine -------------------------------===//
//
// Tensors written to the swap directory and read back are the bytes written,
// with many transfers in flight and in any completion order; the directory
// is fresh, named by rank, its files by tensor, and gone afterwards; O_DIRECT
// where the file system takes it, page-cache I/O with a warning where it
// does not (tmpfs, when this machine lets the test mount one); a missing,
// non-directory or full path and a transfer out of bounds are one line and
// exit status 1, leaving no swap directory behind.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "base/Support.h"
#include "io/SwapIO.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace ztrt;
using namespace ztrt::test;

namespace {

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// `n` bytes of a pattern that differs per tensor and per byte.
std::vector<unsigned char> pattern(int64_t n, unsigned seed) {
  std::vector<unsigned char> v(static_cast<size_t>(n));
  std::mt19937 gen(seed);
  for (auto &b : v)
    b = static_cast<unsigned char>(gen());
  return v;
}

struct Buffer {
  explicit Buffer(int64_t bytes)
      : p(static_cast<unsigned char *>(SwapSpace::allocate(bytes))) {}
  ~Buffer() { std::free(p); }
  unsigned char *p;
};

TEST(SwapIOTest, WhatIsWrittenIsReadBackWithManyTransfersInFlight) {
  TempDir tmp;
  // Sizes that are and are not multiples of the alignment; the files are
  // rounded up, the transfers cover them whole.
  const std::vector<int64_t> sizes = {4096, 1, 12345, 1 << 20, 65536 + 7, 3};
  std::string dir;
  {
    SwapSpace swap(tmp.root(), /*rank=*/3, /*bytesNeeded=*/4 << 20,
                   /*queueDepth=*/4); // fewer slots than transfers
    dir = swap.directory();
    // <root>/ztrain-swap-<host>-<pid>-rank3
    const std::string prefix = tmp.root() + "/ztrain-swap-",
                      suffix = "-" + std::to_string(::getpid()) + "-rank3";
    EXPECT_EQ(dir.compare(0, prefix.size(), prefix), 0) << dir;
    EXPECT_TRUE(dir.size() > prefix.size() + suffix.size() &&
                dir.compare(dir.size() - suffix.size(), suffix.size(),
                            suffix) == 0)
        << dir;
    std::vector<int> files;
    std::vector<std::unique_ptr<Buffer>> out, in;
    std::vector<int64_t> tickets;
    for (size_t i = 0; i < sizes.size(); ++i) {
      files.push_back(swap.createFile("h." + std::to_string(i) + ".w/exp_avg",
                                      sizes[i]));
      int64_t bytes = SwapSpace::roundUp(sizes[i]);
      out.push_back(std::make_unique<Buffer>(bytes));
      auto data = pattern(bytes, 7 + static_cast<unsigned>(i));
      std::memcpy(out.back()->p, data.data(), data.size());
      tickets.push_back(swap.write(files[i], out.back()->p, bytes, 0));
    }
    // Waited in reverse: completion order does not matter.
    for (size_t i = sizes.size(); i-- > 0;)
      swap.wait(tickets[i]);
    tickets.clear();
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t bytes = SwapSpace::roundUp(sizes[i]);
      in.push_back(std::make_unique<Buffer>(bytes));
      tickets.push_back(swap.read(files[i], in.back()->p, bytes, 0));
    }
    swap.waitAll();
    int64_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t bytes = SwapSpace::roundUp(sizes[i]);
      total += bytes;
      EXPECT_EQ(std::memcmp(out[i]->p, in[i]->p, static_cast<size_t>(bytes)),
                0)
          << "tensor " << i;
    }
    EXPECT_EQ(swap.bytesWritten(), total);
    EXPECT_EQ(swap.bytesRead(), total);
    // Files named by tensor, unsafe characters replaced.
    EXPECT_TRUE(exists(dir + "/h.0.w_exp_avg"));
    EXPECT_TRUE(exists(dir + "/h.5.w_exp_avg"));
    std::printf("swap I/O on %s: %s, %s\n", tmp.root().c_str(),
                swap.asynchronous() ? "io_uring" : "pread/pwrite",
                swap.direct() ? "O_DIRECT" : "page cache");
  }
  EXPECT_FALSE(exists(dir)) << "the swap directory outlives the engine";
  EXPECT_TRUE(tmp.entries().empty());
}

TEST(SwapIOTest, PartialTransfersAtOffsets) {
  TempDir tmp;
  SwapSpace swap(tmp.root(), 0, 1 << 20);
  const int64_t block = SwapSpace::kAlignment;
  int f = swap.createFile("t", 8 * block);
  Buffer a(8 * block), b(2 * block);
  auto data = pattern(8 * block, 1);
  std::memcpy(a.p, data.data(), data.size());
  swap.wait(swap.write(f, a.p, 8 * block, 0));
  swap.wait(swap.read(f, b.p, 2 * block, 3 * block));
  EXPECT_EQ(std::memcmp(b.p, data.data() + 3 * block, 2 * block), 0);
}

// finished() polls without blocking (the cuda backend copies a read on to
// the device as soon as it reports it done): it turns true by itself, the
// bytes are there when it does, and wait() is still due.
TEST(SwapIOTest, FinishedPollsWithoutBlocking) {
  TempDir tmp;
  SwapSpace swap(tmp.root(), 0, 1 << 20);
  const int64_t bytes = 16 * SwapSpace::kAlignment;
  int f = swap.createFile("t", bytes);
  Buffer a(bytes), b(bytes);
  auto data = pattern(bytes, 5);
  std::memcpy(a.p, data.data(), data.size());
  swap.wait(swap.write(f, a.p, bytes, 0));
  int64_t ticket = swap.read(f, b.p, bytes, 0);
  // Bounded: a read of 64 KiB is done long before a million polls.
  bool done = false;
  for (int i = 0; i < 1000000 && !done; ++i)
    done = swap.finished(ticket);
  ASSERT_TRUE(done);
  EXPECT_EQ(std::memcmp(b.p, data.data(), static_cast<size_t>(bytes)), 0);
  EXPECT_TRUE(swap.finished(ticket)); // stays done until waited
  swap.wait(ticket);
  EXPECT_EXIT(swap.finished(ticket), ::testing::ExitedWithCode(1),
              "swap: no transfer [0-9]+ in flight");
}

TEST(SwapIOTest, WaitAnyRetiresEveryTransferOnce) {
  // Eight reads of distinct blocks in flight: waitAny hands back each
  // ticket exactly once, its data in place, then -1 with nothing left.
  TempDir tmp;
  const int64_t block = 4 * SwapSpace::kAlignment, n = 8;
  SwapSpace swap(tmp.root(), 0, 1 << 20, 8);
  int f = swap.createFile("t", block * n);
  Buffer src(block * n), dst(block * n);
  auto data = pattern(block * n, 9);
  std::memcpy(src.p, data.data(), data.size());
  swap.wait(swap.write(f, src.p, block * n, 0));
  std::set<int64_t> issued, retired;
  for (int64_t i = 0; i < n; ++i)
    issued.insert(swap.read(f, dst.p + i * block, block, i * block));
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = swap.waitAny();
    EXPECT_TRUE(issued.count(t)) << t;
    EXPECT_TRUE(retired.insert(t).second) << "ticket " << t << " twice";
  }
  EXPECT_EQ(swap.waitAny(), -1);
  EXPECT_EQ(std::memcmp(dst.p, data.data(), data.size()), 0);
  // A retired ticket is no longer in flight.
  EXPECT_EXIT(swap.wait(*retired.begin()), ::testing::ExitedWithCode(1),
              "swap: no transfer [0-9]+ in flight");
}

TEST(SwapIOTest, NamesThatCollideStayApart) {
  TempDir tmp;
  SwapSpace swap(tmp.root(), 0, 1 << 20);
  swap.createFile("a/b", 10);
  swap.createFile("a_b", 10);
  swap.createFile("..", 10);
  EXPECT_TRUE(exists(swap.directory() + "/a_b"));
  EXPECT_TRUE(exists(swap.directory() + "/a_b.1"));
  EXPECT_TRUE(exists(swap.directory() + "/t.."));
}

TEST(SwapIOTest, AStaleDirectoryOfTheSameNameIsReplaced) {
  TempDir tmp;
  std::string name;
  { // A directory of this pid's name, left unlocked.
    SwapSpace swap(tmp.root(), 0, 0);
    name = swap.directory();
  }
  ASSERT_EQ(::mkdir(name.c_str(), 0700), 0);
  std::system(("touch '" + name + "/old'").c_str());
  SwapSpace swap(tmp.root(), 0, 0);
  EXPECT_EQ(swap.directory(), name);
  EXPECT_FALSE(exists(name + "/old"));
}

TEST(SwapIOTest, OnlyTheSwapDirectoriesOfEndedRunsAreReclaimed) {
  TempDir tmp;
  // A run that ends without removing its directory (SIGKILL, the OOM
  // killer): a child that creates its swap space and exits without the
  // destructor. The kernel drops its lock.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto *swap = new SwapSpace(tmp.root(), 1, 3 << 20);
    swap->createFile("w", 1 << 20);
    swap->createFile("exp_avg", 2 << 20);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::string killed;
  for (const std::string &name : listDirectory(tmp.root()))
    if (name.find("-" + std::to_string(child) + "-rank1") != std::string::npos)
      killed = tmp.path(name);
  ASSERT_FALSE(killed.empty());
  // This host's name as the killed run wrote it.
  const std::string host = killed.substr(
      tmp.path("ztrain-swap-").size(),
      killed.size() - tmp.path("ztrain-swap-").size() -
          ("-" + std::to_string(child) + "-rank1").size());
  // A directory this host's runs made that no process holds (unlocked):
  // taken. Everything else is left alone, though no process holds it: an
  // earlier version's (no host in the name), other hosts' (a lock taken
  // here says nothing of a process there), names a user chose, a file, a
  // symlink, a directory being made.
  const std::string unheld = tmp.path("ztrain-swap-" + host + "-77-rank0");
  ASSERT_EQ(::mkdir(unheld.c_str(), 0700), 0);
  std::system(("head -c 5000 /dev/zero > '" + unheld + "/m'").c_str());
  const std::vector<std::string> others = {
      "ztrain-swap-77-rank0",
      "ztrain-swap-" + host + "x-5-rank0",
      "ztrain-swap-" + host + "-b-5-rank0",
      "ztrain-swap-keep-rank0",
      "ztrain-swap-" + host + "-6-rank0.unlocked",
      "ztrain-swap-notes",
      "data",
      ".ztrain-swap-" + host + "-9-rank0.new"};
  for (const std::string &dir : others)
    ASSERT_EQ(::mkdir(tmp.path(dir).c_str(), 0700), 0) << dir;
  std::system(
      ("touch '" + tmp.path("ztrain-swap-" + host + "-8-rank0") + "'").c_str());
  ASSERT_EQ(::symlink(tmp.path("data").c_str(),
                      tmp.path("ztrain-swap-" + host + "-7-rank0").c_str()),
            0);
  // A live run: this process's own swap space, which holds its lock.
  SwapSpace live(tmp.root(), 0, 1 << 20);
  live.createFile("p", 4096);

  std::vector<SwapSpace::Stale> stale = SwapSpace::reclaimStale(tmp.root());
  ASSERT_EQ(stale.size(), 2u);
  std::sort(stale.begin(), stale.end(),
            [](const auto &a, const auto &b) { return a.dir < b.dir; });
  const bool unheldFirst = unheld < killed;
  const SwapSpace::Stale &a = stale[unheldFirst ? 0 : 1],
                         &b = stale[unheldFirst ? 1 : 0];
  EXPECT_EQ(a.dir, unheld);
  EXPECT_EQ(a.bytes, 5000); // the files' sizes
  EXPECT_EQ(b.dir, killed);
  EXPECT_EQ(b.bytes, 3 << 20);
  EXPECT_FALSE(exists(unheld));
  EXPECT_FALSE(exists(killed));
  for (const std::string &kept : others)
    EXPECT_TRUE(exists(tmp.path(kept))) << kept;
  for (const std::string &kept :
       {"ztrain-swap-" + host + "-8-rank0", "ztrain-swap-" + host + "-7-rank0"})
    EXPECT_TRUE(exists(tmp.path(kept))) << kept;
  EXPECT_TRUE(exists(live.directory() + "/p"));
  // Nothing more to take the second time.
  EXPECT_TRUE(SwapSpace::reclaimStale(tmp.root()).empty());
}

TEST(SwapIOTest, BadPathsAreOneLine) {
  TempDir tmp;
  EXPECT_EXIT(SwapSpace(tmp.path("missing"), 0, 100),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --nvme-path '.*/missing': No such file or "
              "directory\n$");
  std::system(("touch '" + tmp.path("file") + "'").c_str());
  EXPECT_EXIT(SwapSpace(tmp.path("file"), 0, 100),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --nvme-path '.*/file': not a directory\n$");
  // More than any disk has.
  EXPECT_EXIT(SwapSpace(tmp.root(), 0, int64_t(1) << 62),
              ::testing::ExitedWithCode(1),
              "^ztrain: error: --nvme-path '.*': [0-9]+ bytes free, the plan "
              "swaps 4611686018427387904 bytes per rank\n$");
  EXPECT_EXIT(SwapSpace("", 0, 100), ::testing::ExitedWithCode(1),
              "^ztrain: error: --nvme-path: no directory given\n$");
}

TEST(SwapIOTest, AFatalErrorRemovesTheSwapDirectory) {
  TempDir tmp;
  EXPECT_EXIT(
      {
        SwapSpace swap(tmp.root(), 0, 1 << 20);
        int f = swap.createFile("w", 4096);
        Buffer b(8192);
        swap.write(f, b.p, 8192, 0); // past the file's 4096 bytes
      },
      ::testing::ExitedWithCode(1),
      "^ztrain: error: swap write of '.*/w': bytes \\[0, 8192\\) outside "
      "the file's 4096\n$");
  EXPECT_TRUE(tmp.entries().empty());
}

/// A small tmpfs, when this process may mount one (root with
/// CAP_SYS_ADMIN); the tests that need it skip otherwise.
class SmallTmpfs {
public:
  explicit SmallTmpfs(const std::string &dir, const char *size) : dir(dir) {
    ::mkdir(dir.c_str(), 0700);
    std::string opts = std::string("size=") + size;
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (mounted)
      ::umount(dir.c_str());
  }
  std::string dir;
  bool mounted = false;
};

TEST(SwapIOTest, WithoutODirectAnyBufferWorks) {
  // Page-cache I/O: where the file system refuses O_DIRECT (tmpfs before
  // Linux 6.6) and when asked for.
  TempDir tmp;
  SwapSpace swap(tmp.root(), 0, 100000, 8, /*direct=*/false);
  int f = swap.createFile("t", 100);
  EXPECT_FALSE(swap.direct());
  std::vector<unsigned char> a(100, 0x5a), b(100, 0);
  swap.wait(swap.write(f, a.data() + 1, 99, 1)); // unaligned everything
  swap.wait(swap.read(f, b.data() + 1, 99, 1));
  EXPECT_EQ(b[0], 0); // outside the read
  EXPECT_EQ(std::memcmp(a.data() + 1, b.data() + 1, 99), 0);
}

TEST(SwapIOTest, ODirectTransfersMustBeAligned) {
  TempDir tmp;
  SwapSpace swap(tmp.root(), 0, 100000);
  if (!swap.direct())
    GTEST_SKIP() << "this file system refuses O_DIRECT";
  int f = swap.createFile("t", 8192);
  Buffer b(8192);
  EXPECT_EXIT(swap.write(f, b.p + 1, 4096, 0), ::testing::ExitedWithCode(1),
              "O_DIRECT needs 4096-byte aligned buffers, offsets and "
              "lengths\n$");
  EXPECT_EXIT(swap.write(f, b.p, 100, 0), ::testing::ExitedWithCode(1),
              "O_DIRECT needs 4096-byte aligned");
}

TEST(SwapIOTest, AFullDiskIsFoundWhenTheFileIsCreated) {
  TempDir tmp;
  SmallTmpfs fs(tmp.path("tmpfs"), "64k");
  if (!fs.mounted)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root and "
                    "CAP_SYS_ADMIN)";
  const std::string dir = fs.dir;
  EXPECT_EXIT(
      {
        SwapSpace swap(dir, 0, 1000); // the plan said little...
        swap.createFile("big", 1 << 20); // ...a tensor needs more
      },
      ::testing::ExitedWithCode(1),
      "^(ztrain: warning: .*\n)?ztrain: error: --nvme-path: cannot reserve "
      "1048576 bytes for '.*/big': No space left on device \\(the plan swaps "
      "1000 bytes per rank, and the ranks that share this file system need "
      "that much each\\)\n$");
  // Nothing left on the small disk.
  EXPECT_TRUE(listDirectory(dir).empty());
}

} // namespace
