//===- Emu.h - Internals shared by the CUDA emulator's files ----*- C++ -*-===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator). The
// emulator runs the cuda backend, unchanged, on the host: device memory is
// host memory kept in a registry (so every API call can check that a
// pointer is device memory of the right extent), each stream is a worker
// thread executing its work in order, events order streams as on a GPU,
// kernels run block by block with one fiber per CUDA thread (Grid.cpp).
//
// Faults: what a GPU would answer with an illegal-address fault (a kernel
// or library given host memory or freed memory, a deadlocked barrier, an
// NCCL buffer layout NCCL does not allow) prints what happened to stderr,
// prefixed "cuda emulator:", and makes every later API call return
// cudaErrorIllegalAddress (a sticky error, as on a GPU).
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_CUDAEMU_EMU_H
#define ZTRT_CUDAEMU_EMU_H

#include <cuda_runtime_api.h>

#include <cstdarg>
#include <cstdint>
#include <functional>
#include <string>

namespace ztrt::cudaemu {

/// Runs `op` in order on `stream`'s worker; at once on the calling thread
/// for the legacy default stream (nullptr).
void enqueue(cudaStream_t stream, std::function<void()> op);
/// Blocks the host until everything enqueued on `stream` has run.
void drain(cudaStream_t stream);
bool validStream(cudaStream_t stream);

/// [ptr, ptr + bytes) lies inside one live device allocation (not freed,
/// not pending a cudaFreeAsync). Zero bytes: ptr is inside or one past.
bool isDevice(const void *ptr, size_t bytes);
/// For work already enqueued, when its stream runs it: [ptr, ptr + bytes)
/// lies in a device allocation not yet freed (a cudaFreeAsync later in
/// stream order is fine).
bool isLiveDevice(const void *ptr, size_t bytes);
/// ptr is inside any device allocation, live or not.
bool anyDevice(const void *ptr);
/// "0x... (device allocation of N bytes at offset K)" or "(host memory)".
std::string describe(const void *ptr);

/// Prints "cuda emulator: <prefix><message>" to stderr.
void vreport(const char *prefix, const char *format, va_list args);
/// Prints "cuda emulator: <message>" to stderr.
void report(const char *format, ...) __attribute__((format(printf, 1, 2)));
/// Records a GPU fault: prints the message and sets the sticky error.
void fault(const char *format, ...) __attribute__((format(printf, 1, 2)));
/// The sticky error, cudaSuccess when none.
cudaError_t sticky();
/// Sets the calling thread's last error (cudaGetLastError) and returns it.
cudaError_t fail(cudaError_t error);

int currentDevice();
int deviceCount();

/// An environment variable as an integer, or `fallback`.
long long envInt(const char *name, long long fallback);

} // namespace ztrt::cudaemu

#endif // ZTRT_CUDAEMU_EMU_H
