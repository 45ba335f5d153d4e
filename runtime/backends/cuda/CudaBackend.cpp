//===- CudaBackend.cpp - The CUDA / NCCL backend --------------------------===//
//
// Part of ztrain's runtime. Host side of the cuda backend: device, streams,
// memory, cuBLAS, NCCL, the enqueued collectives and the deferred error
// checks. The kernels are in the .cu files (Kernels.h). Design: docs/cuda.md.
//
// This file: the device, construction and teardown, synchronization,
// memory and copies, and the error slots; the kernels, collectives and
// zero-offload's host memory are defined by family in the files
// CudaBackendImpl.h names.
//
// Element types. Every kernel method dispatches on its DType to one
// launcher template instantiated for float, bf16 and f16 (base/DType.h's
// storage types, converted on the device): loads widened to float, each
// output rounded once. matmul is cuBLAS's sgemm for float and GemmEx with
// CUBLAS_COMPUTE_32F for bf16 / f16; collectives hand NCCL the dtype's
// ncclFloat32 / ncclBfloat16 / ncclFloat16 and count wire bytes in its
// element size.
//
// Streams. All kernels, copies and frees run on one compute stream, in call
// order, so a step's program order is the device's order. Collectives run
// on a communication stream of higher priority (NCCL kernels should not
// queue behind compute kernels they could overlap): enqueueCollective
// records an event on the compute stream, makes the communication stream
// wait for it, enqueues the NCCL call and records a completion event;
// awaitCollective makes the compute stream wait for that event. The host
// never blocks in either, so the compiler's schedule (start early, wait
// late) is the overlap the device gets.
//
// Memory. cudaMallocAsync / cudaFreeAsync on the compute stream, from the
// device's default pool with its release threshold at the maximum: freed
// blocks stay cached for the next step's allocations (a caching allocator
// without our own bookkeeping), and a free is ordered after every use the
// program made before it. No managed memory.
//
// Errors. API errors are fatal at once. Data errors (a label or id out of
// range) are found by the kernels, which record the first offending index
// in an error slot and never read out of bounds; the host reads the slots
// at its next synchronization (synchronize(), copyToHost) and reports the
// first error in call order with the cpu backend's message.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/CudaBackendImpl.h"

#include "backends/cuda/Libraries.h"
#include "comm/Communicator.h"
#include "base/Support.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <dlfcn.h>
#include <limits>
#include <mutex>
#include <vector>

namespace ztrt {

namespace cuda {

void check(cudaError_t status, const char *what) {
  if (status == cudaSuccess)
    return;
  fatal("cuda: %s: %s (%s)", what, cudaGetErrorString(status),
        cudaGetErrorName(status));
}

void *scratch(int64_t bytes, cudaStream_t stream, const char *op) {
  void *ptr = nullptr;
  cudaError_t status = cudaMallocAsync(
      &ptr, static_cast<size_t>(std::max<int64_t>(bytes, 1)), stream);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fatal("%s: out of cuda memory allocating %lld bytes of scratch", op,
          static_cast<long long>(bytes));
  }
  check(status, "cudaMallocAsync");
  return ptr;
}

} // namespace cuda

namespace {

// Every allocation is a multiple of this: distinct pointers for 0 bytes,
// and any vector width is aligned.
constexpr int64_t kAllocationGranule = 256;
// Checking kernels between two synchronizations; more forces one.
constexpr size_t kErrorSlots = 256;
// Pinned bytes for copyToHostAtSync between two synchronizations.
constexpr size_t kStagingBytes = 4096;

} // namespace

CudaBackend::CudaBackend(const CudaOptions &options) : options(options) {
  device = options.device;
  check(cudaSetDevice(device), "cudaSetDevice");
  int pools = 0;
  check(
      cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device),
      "cudaDeviceGetAttribute");
  if (!pools)
    fatal("--backend cuda: device %d does not support stream-ordered "
          "memory pools (cudaMallocAsync), which the backend needs",
          device);
  // Keep freed memory in the pool: a step frees and re-allocates the same
  // activation sizes every time.
  check(cudaDeviceGetDefaultMemPool(&pool, device),
        "cudaDeviceGetDefaultMemPool");
  uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                &threshold),
        "cudaMemPoolSetAttribute");
  // Memory freed on one stream is not handed to an allocation on the
  // other by making that stream wait (the pool's default): a compute
  // allocation reusing a collective's staging buffer would then wait for
  // the collective, serializing what the schedule overlaps. The events
  // already order every use; the pool reuses memory whose free has
  // completed (opportunistic reuse, on by default).
  int internalDependencies = 0;
  check(cudaMemPoolSetAttribute(pool,
                                cudaMemPoolReuseAllowInternalDependencies,
                                &internalDependencies),
        "cudaMemPoolSetAttribute");
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest),
        "cudaDeviceGetStreamPriorityRange");
  check(cudaStreamCreateWithPriority(&compute, cudaStreamNonBlocking, least),
        "cudaStreamCreate");
  check(cudaStreamCreateWithPriority(&comm, cudaStreamNonBlocking, greatest),
        "cudaStreamCreate");

  const cuda::CublasApi &blas = cuda::cublas();
  checkBlas(blas.create(&handle), "cublasCreate");
  checkBlas(blas.setStream(handle, compute), "cublasSetStream");
  // CUBLAS_DEFAULT_MATH keeps float32 GEMMs in float32: no TF32 tensor
  // cores (that needs CUBLAS_TF32_TENSOR_OP_MATH), so results match the
  // cpu backend up to summation order (CudaConformanceTest checks it).
  checkBlas(blas.setMathMode(handle, CUBLAS_DEFAULT_MATH),
            "cublasSetMathMode");

  check(cudaMalloc(&slots, kErrorSlots * sizeof(cuda::ErrorSlot)),
        "cudaMalloc");
  check(cudaMemsetAsync(slots, 0xff, kErrorSlots * sizeof(cuda::ErrorSlot),
                        compute),
        "cudaMemsetAsync");
  check(cudaMallocHost(&staging, kStagingBytes), "cudaMallocHost");
  check(cudaEventCreate(&base), "cudaEventCreate");
  rebase();
}

CudaBackend::~CudaBackend() {
  // Best effort: errors here cannot be reported through fatal() (it may
  // be running already).
  cudaStreamSynchronize(comm);
  cudaStreamSynchronize(compute);
  if (ncclComm)
    cuda::nccl().commDestroy(ncclComm);
  for (auto &[id, ticket] : tickets)
    for (cudaEvent_t e :
         {ticket.ready, ticket.begin, ticket.end, ticket.reached})
      if (e)
        cudaEventDestroy(e);
  for (cudaEvent_t e : timedEvents)
    cudaEventDestroy(e);
  for (cudaEvent_t e : untimedEvents)
    cudaEventDestroy(e);
  for (auto &[fence, event] : fences)
    cudaEventDestroy(event);
  for (cudaEvent_t e : spareFences)
    cudaEventDestroy(e);
  cudaEventDestroy(base);
  cudaFreeHost(staging);
  cudaFree(slots);
  cuda::cublas().destroy(handle);
  for (cudaStream_t s : {copies, hostStepCopies})
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  cudaStreamDestroy(comm);
  cudaStreamDestroy(compute);
}

void CudaBackend::bindThread() {
  check(cudaSetDevice(device), "cudaSetDevice");
}

const char *CudaBackend::name() const { return "cuda"; }
std::string CudaBackend::deviceName() const {
  return cudaDeviceDescription(options.device);
}
Backend::PeakRate CudaBackend::peakRate(bool sixteenBit) const {
  return cudaPeakRate(options.device, sixteenBit);
}
bool CudaBackend::deviceMemory(uint64_t &freeBytes, uint64_t &totalBytes) {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  freeBytes = free;
  totalBytes = total;
  return true;
}
// Kernels run on the device; --threads only sets what the report says.
void CudaBackend::setThreads(int threads) { hostThreads = threads; }
int CudaBackend::threads() const { return hostThreads; }
void CudaBackend::adoptThreads(int) {}

void CudaBackend::attach(Communicator &world) {
  ranks = world.count();
  rank = world.rank();
  if (ranks == 1 && !options.ncclInWorldOfOne)
    return;
  // NCCL's bootstrap: rank 0 makes the id, MPI carries it to the others,
  // and every rank joins the communicator on its own GPU.
  const cuda::NcclApi &api = cuda::nccl();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0)
    checkNccl(api.getUniqueId(&id), "ncclGetUniqueId");
  world.broadcastBytes(&id, sizeof(id), 0);
  check(cudaSetDevice(device), "cudaSetDevice");
  checkNccl(api.commInitRank(&ncclComm, ranks, id, rank), "ncclCommInitRank");
}

void CudaBackend::checkMesh(int64_t shard, int64_t replicate) {
  if (replicate > 1)
    refuse("--backend cuda: hybrid sharding (mesh of %lld shard x %lld "
           "replicate ranks) runs on the cpu backend only for now (NCCL "
           "communicators per shard and replicate group are not there yet); "
           "run with --backend cpu, or compile without --dp-replicate",
           static_cast<long long>(shard), static_cast<long long>(replicate));
}

void CudaBackend::synchronize() {
  awaitStream(comm);
  awaitStream(compute);
  cudaStream_t copyStreams[2] = {nullptr, nullptr};
  {
    std::lock_guard<std::mutex> lock(fenceMutex);
    copyStreams[0] = copies;
    copyStreams[1] = hostStepCopies;
  }
  for (cudaStream_t s : copyStreams)
    if (s)
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  for (const Staged &s : staged)
    std::memcpy(s.hostDst, staging + s.offset, s.bytes);
  staged.clear();
  stagingUsed = 0;
  reportErrors();
  if (ncclComm) {
    ncclResult_t state = ncclSuccess;
    checkNccl(cuda::nccl().commGetAsyncError(ncclComm, &state),
              "ncclCommGetAsyncError");
    // Non-blocking communicators report work in progress; ours block.
    if (inProgress(state))
      state = ncclSuccess;
    checkNccl(state, "collective");
  }
  placeTickets();
  rebase();
}

// --- Memory ----------------------------------------------------------------

void *CudaBackend::allocate(int64_t bytes) {
  if (bytes > std::numeric_limits<int64_t>::max() - kAllocationGranule)
    return nullptr;
  const int64_t rounded =
      (std::max<int64_t>(bytes, 1) + kAllocationGranule - 1) /
      kAllocationGranule * kAllocationGranule;
  void *ptr = nullptr;
  cudaError_t status =
      cudaMallocAsync(&ptr, static_cast<size_t>(rounded), compute);
  if (status == cudaErrorMemoryAllocation) {
    // The pool keeps every freed block (release threshold: all), which
    // fragmented sizes or memory taken outside it (NCCL's buffers,
    // cuBLAS's workspace) can leave unusable: finish the pending frees,
    // give the pool's unused memory back to the device, and try once
    // more, as PyTorch's caching allocator does.
    cudaGetLastError();
    check(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
    check(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
    status = cudaMallocAsync(&ptr, static_cast<size_t>(rounded), compute);
  }
  // Out of memory; a size the pool can never satisfy may also come back
  // as an invalid value. Neither is sticky: the caller reports it.
  if (status == cudaErrorMemoryAllocation ||
      status == cudaErrorInvalidValue) {
    cudaGetLastError();
    return nullptr;
  }
  check(status, "cudaMallocAsync");
  return ptr;
}

void CudaBackend::deallocate(void *ptr) {
  check(cudaFreeAsync(ptr, compute), "cudaFreeAsync");
}

// The synchronous copies take cudaMemcpyDefault: their backend pointer
// may be mapped pinned host memory (zero-offload's host placements),
// which unified addressing classifies, rather than device memory.
void CudaBackend::copyFromHost(void *dst, const void *hostSrc, int64_t bytes) {
  if (bytes <= 0)
    return;
  check(cudaMemcpyAsync(dst, hostSrc, static_cast<size_t>(bytes),
                        cudaMemcpyDefault, compute),
        "cudaMemcpyAsync (host to device)");
  // The host buffer may be reused as soon as this returns.
  awaitStream(compute);
}

void CudaBackend::copyToHost(void *hostDst, const void *src, int64_t bytes) {
  if (bytes <= 0)
    return;
  check(cudaMemcpyAsync(hostDst, src, static_cast<size_t>(bytes),
                        cudaMemcpyDefault, compute),
        "cudaMemcpyAsync (device to host)");
  awaitStream(compute);
  // What was computed before is known now: report its data errors
  // rather than hand out values computed from them.
  reportErrors();
}

void CudaBackend::copyToHostAtSync(void *hostDst, const void *src,
                                   int64_t bytes) {
  if (bytes <= 0)
    return;
  const size_t size = static_cast<size_t>(bytes);
  if (stagingUsed + size > kStagingBytes)
    synchronize();
  if (size > kStagingBytes) {
    copyToHost(hostDst, src, bytes);
    return;
  }
  check(cudaMemcpyAsync(staging + stagingUsed, src, size,
                        cudaMemcpyDefault, compute),
        "cudaMemcpyAsync (device to host)");
  staged.push_back({hostDst, stagingUsed, size});
  stagingUsed += (size + 15) / 16 * 16;
}

void CudaBackend::copy(const void *src, void *dst, int64_t bytes) {
  if (bytes <= 0 || src == dst)
    return;
  // memmove semantics (the compiler may copy onto an overlapping view);
  // cudaMemcpy's are undefined for overlap, so go through scratch.
  if (overlaps(src, bytes, dst, bytes)) {
    void *tmp = cuda::scratch(bytes, compute, "copy");
    check(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, compute),
          "cudaMemcpyAsync");
    check(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, compute),
          "cudaMemcpyAsync");
    cuda::release(tmp, compute);
    return;
  }
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                        cudaMemcpyDeviceToDevice, compute),
        "cudaMemcpyAsync");
}

void CudaBackend::copy2d(const void *src, void *dst, int64_t rows,
                         int64_t rowBytes, int64_t srcStride,
                         int64_t dstStride) {
  cuda::copy2d(src, dst, rows, rowBytes, srcStride, dstStride, compute);
}

cuda::ErrorSlot *CudaBackend::slot(const char *op, bool labels, int64_t bound) {
  if (slotInfo.size() == kErrorSlots) {
    awaitStream(compute);
    reportErrors();
  }
  slotInfo.push_back({op, labels, bound});
  return slots + slotInfo.size() - 1;
}

/// Fatal with the cpu backend's message for the first recorded error, in
/// call order; then the slots are free again. The compute stream must
/// have finished the checking kernels.
void CudaBackend::reportErrors() {
  if (slotInfo.empty())
    return;
  std::vector<cuda::ErrorSlot> values(slotInfo.size());
  check(cudaMemcpy(values.data(), slots,
                   values.size() * sizeof(cuda::ErrorSlot),
                   cudaMemcpyDeviceToHost),
        "cudaMemcpy (error slots)");
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == cuda::kNoError)
      continue;
    const SlotInfo &info = slotInfo[i];
    const long long index = static_cast<long long>(values[i] >> 32);
    const int32_t value =
        static_cast<int32_t>(static_cast<uint32_t>(values[i] & 0xffffffffu));
    if (info.labels)
      fatal("%s: label %d out of range [0, %lld) at row %lld", info.op, value,
            static_cast<long long>(info.bound), index);
    fatal("%s: id %d out of range [0, %lld) at position %lld", info.op, value,
          static_cast<long long>(info.bound), index);
  }
  check(cudaMemsetAsync(slots, 0xff,
                        slotInfo.size() * sizeof(cuda::ErrorSlot), compute),
        "cudaMemsetAsync");
  slotInfo.clear();
}

int cudaDeviceCount(std::string *reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    *reason = format("cudaGetDeviceCount returned %s (%s)",
                     cudaGetErrorName(status), cudaGetErrorString(status));
    // "Driver version is insufficient" is also what a machine without any
    // NVIDIA driver gets; say which it is.
    if (void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL))
      dlclose(driver);
    else
      *reason += "; the NVIDIA driver (libcuda.so.1) is not installed";
    return 0;
  }
  if (count == 0)
    *reason = "cudaGetDeviceCount found no device";
  return count;
}

std::string cudaDeviceDescription(int device) {
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return format("%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1 << 30));
}

Backend::PeakRate cudaPeakRate(int device, bool sixteenBit) {
  int major = 0, minor = 0, sms = 0, khz = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                               device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                               device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device),
        "cudaDeviceGetAttribute");
  // Dense FLOPs per clock per SM of the data-center parts (NVIDIA's
  // architecture whitepapers): float32 is FFMA on the CUDA cores (the
  // backend keeps TF32 off); 16-bit is the tensor cores with float32
  // accumulation (GeForce parts of sm_86 / sm_89 accumulate at half that).
  struct Arch {
    int sm, fp32, half;
  };
  static const Arch arches[] = {{70, 128, 1024}, {75, 128, 1024},
                                {80, 128, 2048}, {86, 256, 1024},
                                {89, 256, 1024}, {90, 256, 4096}};
  const int sm = major * 10 + minor;
  for (const Arch &a : arches) {
    if (a.sm != sm)
      continue;
    const int perClock = sixteenBit ? a.half : a.fp32;
    const double tflops =
        static_cast<double>(sms) * khz * 1e3 * perClock / 1e12;
    return {tflops, format("%d SMs x %d MHz x %d FLOP/clock (sm_%d, %s)", sms,
                           khz / 1000, perClock, sm,
                           sixteenBit ? "16-bit tensor cores"
                                      : "float32 CUDA cores")};
  }
  return {0.0, format("no peak rate known for sm_%d", sm)};
}

int selectCudaDevice(const CommunicatorParams &params) {
  std::string reason;
  const int count = cudaDeviceCount(&reason);
  if (count == 0)
    fatal("--backend cuda: no CUDA device: %s", reason.c_str());
  if (params.localCount <= count)
    return params.localRank;
  // One visible device per rank: the launcher gave each rank its own GPU
  // (CUDA_VISIBLE_DEVICES per rank). If they all see the same one, NCCL
  // refuses to put two ranks on it.
  if (count == 1)
    return 0;
  fatal("--backend cuda: %d ranks on this node but %d CUDA devices visible "
        "(one GPU per rank: launch at most %d ranks per node)",
        params.localCount, count, count);
}

std::unique_ptr<Backend> createCudaBackend(const CudaOptions &options) {
  return std::make_unique<CudaBackend>(options);
}

} // namespace ztrt
