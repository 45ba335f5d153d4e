//===- Nccl.cpp - NCCL's collectives over MPI
//--------------------------------===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator). What the
// cuda backend calls of NCCL, with NCCL's checks:
//
// - ncclCommInitRank: every rank must pass the same unique id (the
//   bootstrap's broadcast worked) and its own rank; two ranks on one node
//   may not use the same device ("Duplicate GPU detected", as NCCL says).
//   A communicator of more than one rank spans MPI_COMM_WORLD.
// - collectives: sums and broadcasts of ncclFloat32, ncclBfloat16 and
//   ncclFloat16 buffers in device memory of the extent the call touches;
//   send and receive buffers may overlap only in NCCL's in-place layout
//   (allGather: sendbuff == recvbuff + rank * count; reduceScatter:
//   recvbuff == sendbuff + rank * count; the others: identical pointers).
//   float32 sums are MPI's (MPI_SUM on MPI_FLOAT); bf16 / f16 sums gather
//   every rank's elements and add them widened to float in rank order,
//   rounding each result once (NCCL itself adds in its ring or tree order
//   in the element type; the emulator's sum is the cpu backend's).
//
// In a communicator of one rank the collective is a copy on the stream, in
// stream order. With more ranks the exchange runs on the calling thread
// (through MPI, which the program initialized) after the stream has
// finished what was enqueued before it, so it reads exactly what stream
// order allows; its result is written to the receive buffer by the stream,
// in stream order, so a reader that does not wait for the stream reads
// stale data as on a GPU. Only the host blocks where a GPU would not.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/emu/Emu.h"
#include "base/DType.h"

#include <nccl.h>

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace ztrt::cudaemu {
struct NcclComm {
  int ranks = 1, rank = 0, device = 0;
};
} // namespace ztrt::cudaemu

using namespace ztrt::cudaemu;

namespace {

constexpr char kMagic[] = "ztrain-cudaemu-nccl-id";

bool overlaps(const void *a, size_t aBytes, const void *b, size_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bBytes && y < x + aBytes;
}

ncclResult_t invalid(const char *format, ...)
    __attribute__((format(printf, 1, 2)));
ncclResult_t invalid(const char *format, ...) {
  va_list args;
  va_start(args, format);
  vreport("NCCL: ", format, args);
  va_end(args);
  return ncclInvalidUsage;
}

/// Bytes of one element of `type`, 0 for the types the emulator does not
/// implement.
size_t typeBytes(ncclDataType_t type) {
  switch (type) {
  case ncclFloat32:
    return ztrt::elementBytes(ztrt::DType::F32);
  case ncclBfloat16:
    return ztrt::elementBytes(ztrt::DType::BF16);
  case ncclFloat16:
    return ztrt::elementBytes(ztrt::DType::F16);
  default:
    return 0;
  }
}

/// The MPI type that moves one element of `type` unchanged (counts stay
/// element counts, as NCCL's are).
MPI_Datatype moveType(ncclDataType_t type) {
  return type == ncclFloat32 ? MPI_FLOAT : MPI_UINT16_T;
}

/// Checks the communicator, type, and buffers of a collective.
ncclResult_t checkCall(const char *api, ncclComm_t comm, ncclDataType_t type,
                       const void *send, size_t sendBytes, const void *recv,
                       size_t recvBytes, bool inPlace, cudaStream_t stream) {
  if (!comm)
    return invalid("%s: null communicator", api);
  if (typeBytes(type) == 0)
    return invalid("%s: the emulator implements ncclFloat32, ncclBfloat16 "
                   "and ncclFloat16 only",
                   api);
  if (!validStream(stream))
    return invalid("%s: invalid stream", api);
  if (sticky())
    return ncclUnhandledCudaError;
  if (!isDevice(send, sendBytes))
    return invalid("%s: send buffer %s (%zu bytes) is not device memory", api,
                   describe(send).c_str(), sendBytes);
  if (!isDevice(recv, recvBytes))
    return invalid("%s: receive buffer %s (%zu bytes) is not device memory",
                   api, describe(recv).c_str(), recvBytes);
  if (!inPlace && overlaps(send, sendBytes, recv, recvBytes))
    return invalid("%s: send and receive buffers overlap outside NCCL's "
                   "in-place layout (undefined in NCCL)",
                   api);
  return ncclSuccess;
}

/// Writes `result` to `recv` in `stream`'s order.
void deliver(cudaStream_t stream, void *recv, std::vector<char> result) {
  auto data = std::make_shared<std::vector<char>>(std::move(result));
  enqueue(stream, [recv, data] {
    const size_t bytes = data->size();
    if (!isLiveDevice(recv, bytes)) {
      fault("NCCL collective: the receive buffer %s was freed before the "
            "collective wrote it (its free is not ordered after the "
            "collective)",
            describe(recv).c_str());
      return;
    }
    std::memcpy(recv, data->data(), bytes);
  });
}

/// Runs a collective that writes `resultBytes` to `recv`: in a one-rank
/// communicator the copy of `send` on the stream; otherwise
/// `exchange(out)` (MPI) on the host once the stream's earlier work is done,
/// its result delivered in stream order.
template <typename Exchange>
ncclResult_t run(ncclComm_t comm, cudaStream_t stream, const void *send,
                 void *recv, size_t resultBytes, Exchange exchange) {
  if (comm->ranks == 1) {
    enqueue(stream, [=] { std::memmove(recv, send, resultBytes); });
    return ncclSuccess;
  }
  drain(stream);
  std::vector<char> out(resultBytes);
  exchange(out.data());
  deliver(stream, recv, std::move(out));
  return ncclSuccess;
}

/// out[i] = T(sum over s of float(blocks[s * count + i])), s in rank order
/// 0..ranks-1: the sum of a 16-bit type, accumulated in float and rounded
/// once.
template <typename T>
void sumInRankOrder(const char *blocks, char *out, size_t count, int ranks) {
  const T *in = reinterpret_cast<const T *>(blocks);
  T *result = reinterpret_cast<T *>(out);
  for (size_t i = 0; i < count; ++i) {
    float sum = static_cast<float>(in[i]);
    for (int s = 1; s < ranks; ++s)
      sum += static_cast<float>(in[static_cast<size_t>(s) * count + i]);
    result[i] = static_cast<T>(sum);
  }
}

/// `blocks` holds `ranks` blocks of `count` elements of a 16-bit `type`;
/// writes their element-wise sum to `out`.
void sumBlocks(ncclDataType_t type, const char *blocks, char *out, size_t count,
               int ranks) {
  if (type == ncclBfloat16)
    sumInRankOrder<ztrt::bf16>(blocks, out, count, ranks);
  else
    sumInRankOrder<ztrt::f16>(blocks, out, count, ranks);
}

bool mpiReady() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

} // namespace

ncclResult_t ncclGetVersion(int *version) {
  if (!version)
    return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id)
    return ncclInvalidArgument;
  static int counter = 0;
  std::memset(id, 0, sizeof(*id));
  std::snprintf(id->internal, sizeof(id->internal), "%s:%d:%d", kMagic,
                static_cast<int>(getpid()), ++counter);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id,
                              int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
    return invalid("ncclCommInitRank: rank %d of %d", rank, nranks);
  if (std::strncmp(id.internal, kMagic, sizeof(kMagic) - 1) != 0)
    return invalid("ncclCommInitRank: the unique id was not made by "
                   "ncclGetUniqueId (was it broadcast from rank 0?)");
  const int device = currentDevice();
  if (nranks > 1) {
    if (!mpiReady())
      return invalid("ncclCommInitRank: %d ranks, but MPI (the emulator's "
                     "transport) is not initialized",
                     nranks);
    int worldSize = 0, worldRank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
    MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
    if (worldSize != nranks || worldRank != rank)
      return invalid("ncclCommInitRank: rank %d of %d, but this process is "
                     "rank %d of MPI_COMM_WORLD's %d (the emulator's "
                     "communicators span MPI_COMM_WORLD)",
                     rank, nranks, worldRank, worldSize);
    struct Member {
      ncclUniqueId id;
      char host[64];
      int device;
    } me;
    std::memset(&me, 0, sizeof(me));
    me.id = id;
    gethostname(me.host, sizeof(me.host) - 1);
    me.device = device;
    std::vector<Member> all(static_cast<size_t>(nranks));
    MPI_Allgather(&me, sizeof(me), MPI_BYTE, all.data(), sizeof(me), MPI_BYTE,
                  MPI_COMM_WORLD);
    for (int r = 0; r < nranks; ++r) {
      if (std::memcmp(&all[r].id, &id, sizeof(id)) != 0)
        return invalid("ncclCommInitRank: rank %d passed another unique id "
                       "than rank %d",
                       r, rank);
      if (r != rank && all[r].device == device &&
          std::strcmp(all[r].host, me.host) == 0)
        return invalid("ncclCommInitRank: Duplicate GPU detected: rank %d and "
                       "rank %d both on device %d of %s",
                       rank, r, device, me.host);
    }
  }
  *comm = new NcclComm{nranks, rank, device};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *error) {
  if (!comm || !error)
    return ncclInvalidArgument;
  *error = ncclSuccess;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  if (op != ncclSum)
    return invalid("ncclAllReduce: the emulator implements ncclSum only");
  if (ncclResult_t r = checkCall("ncclAllReduce", comm, type, send, bytes, recv,
                                 bytes, send == recv, stream))
    return r;
  return run(comm, stream, send, recv, bytes, [&](char *out) {
    if (type == ncclFloat32) {
      MPI_Allreduce(send, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      return;
    }
    // Every rank's elements, then the rank-order float sum.
    std::vector<char> all(bytes * static_cast<size_t>(comm->ranks));
    MPI_Allgather(send, static_cast<int>(count), moveType(type), all.data(),
                  static_cast<int>(count), moveType(type), MPI_COMM_WORLD);
    sumBlocks(type, all.data(), out, count, comm->ranks);
  });
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                               ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum)
    return invalid("ncclReduceScatter: the emulator implements ncclSum only");
  const size_t bytes = count * typeBytes(type);
  const int ranks = comm ? comm->ranks : 1, rank = comm ? comm->rank : 0;
  const bool inPlace = recv == static_cast<const char *>(send) +
                                   static_cast<size_t>(rank) * bytes;
  if (ncclResult_t r = checkCall("ncclReduceScatter", comm, type, send,
                                 bytes * ranks, recv, bytes, inPlace, stream))
    return r;
  return run(comm, stream, send, recv, bytes, [&](char *out) {
    if (type == ncclFloat32) {
      MPI_Reduce_scatter_block(send, out, static_cast<int>(count), MPI_FLOAT,
                               MPI_SUM, MPI_COMM_WORLD);
      return;
    }
    // Block s of `blocks` is rank s's chunk for this rank.
    std::vector<char> blocks(bytes * static_cast<size_t>(ranks));
    MPI_Alltoall(send, static_cast<int>(count), moveType(type), blocks.data(),
                 static_cast<int>(count), moveType(type), MPI_COMM_WORLD);
    sumBlocks(type, blocks.data(), out, count, ranks);
  });
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  const int ranks = comm ? comm->ranks : 1, rank = comm ? comm->rank : 0;
  const bool inPlace = send == static_cast<const char *>(recv) +
                                   static_cast<size_t>(rank) * bytes;
  if (ncclResult_t r = checkCall("ncclAllGather", comm, type, send, bytes, recv,
                                 bytes * ranks, inPlace, stream))
    return r;
  return run(comm, stream, send, recv, bytes * static_cast<size_t>(ranks),
             [&](char *out) {
               MPI_Allgather(send, static_cast<int>(count), moveType(type), out,
                             static_cast<int>(count), moveType(type),
                             MPI_COMM_WORLD);
             });
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count,
                           ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  if (comm && (root < 0 || root >= comm->ranks))
    return invalid("ncclBroadcast: root %d of %d ranks", root, comm->ranks);
  // sendbuff is only read on the root.
  const bool isRoot = comm && comm->rank == root;
  if (ncclResult_t r =
          checkCall("ncclBroadcast", comm, type, isRoot ? send : recv, bytes,
                    recv, bytes, !isRoot || send == recv, stream))
    return r;
  return run(comm, stream, send, recv, bytes, [&](char *out) {
    if (isRoot)
      std::memcpy(out, send, bytes);
    MPI_Bcast(out, static_cast<int>(count), moveType(type), root,
              MPI_COMM_WORLD);
  });
}
