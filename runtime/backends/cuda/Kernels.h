//===- Kernels.h - CUDA kernel launchers of the cuda backend ----*- C++ -*-===//
//
// Part of ztrain's runtime. Host functions that enqueue the backend's CUDA
// kernels on a stream and return; the kernels themselves live in the .cu
// files of this directory (Elementwise.cu, Rows.cu, Layout.cu), compiled
// by nvcc with --fmad=false so that float expressions round exactly like
// the cpu backend's (no FMA contraction on either side).
//
// Every launcher is a template on the element type T (storage) with float
// arithmetic (double where the cpu backend accumulates in double),
// instantiated for float, ztrt::bf16 and ztrt::f16 (base/DType.h, whose
// conversions are __host__ __device__): loads go through
// static_cast<float>, and each output element is stored once through
// static_cast<T>, so a bf16 / f16 result is the float kernel's result on
// the widened inputs, rounded once. For T = float the conversions are the
// identity: the float kernels are unchanged by the templating.
//
// Launchers do nothing for empty tensors (a CUDA grid may not be empty).
// Data checks (label and id ranges) are done by the kernels, which record
// the first offending index in an error slot (see ErrorSlot); the backend
// reports it at its next synchronize().
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_BACKENDS_CUDA_KERNELS_H
#define ZTRT_BACKENDS_CUDA_KERNELS_H

#include "base/DType.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ztrt::vecmath {
struct RopeScaling; // backends/cpu/VecMath.h
} // namespace ztrt::vecmath

namespace ztrt::cuda {

/// Fatal runtime error `cuda: <what>: <CUDA's message>` unless `status` is
/// cudaSuccess (defined in CudaBackend.cpp).
void check(cudaError_t status, const char *what);

/// Stream-ordered scratch memory from the device's pool (cudaMallocAsync);
/// fatal when the device is out of memory.
void *scratch(int64_t bytes, cudaStream_t stream, const char *op);
inline void release(void *ptr, cudaStream_t stream) {
  check(cudaFreeAsync(ptr, stream), "cudaFreeAsync");
}

/// A device word that a checking kernel sets (atomicMin) to
/// (index << 32) | uint32(value) of the first offending element: the row of
/// a label, the position of an id. All ones: no error. Kernels only record;
/// they never read out of bounds.
using ErrorSlot = unsigned long long;
constexpr ErrorSlot kNoError = ~0ULL;

// --- Elementwise (Elementwise.cu) --------------------------------------------

/// out = op(a, b) and out = op(x): the operations of backends/Elementwise.def,
/// by Name (the formulas are there, shared with the cpu backend).
enum class Binary {
#define ZTRT_BINARY(method, Name, expr) Name,
#include "backends/Elementwise.def"
};
enum class Unary {
#define ZTRT_UNARY(method, Name, expr) Name,
#include "backends/Elementwise.def"
};

template <typename T>
void fill(T *out, int64_t n, float value, cudaStream_t stream);
template <typename T>
void binary(Binary op, const T *a, const T *b, T *out, int64_t n,
            cudaStream_t stream);
template <typename T>
void unary(Unary op, const T *x, T *out, int64_t n, cudaStream_t stream);
template <typename T>
void scale(const T *x, T *out, int64_t n, float factor, cudaStream_t stream);
/// out[i] /= divisor: the mean of a collective (the sum divided by N in
/// float, as the cpu backend does).
template <typename T>
void divide(T *buf, int64_t n, float divisor, cudaStream_t stream);
template <typename T>
void biasAdd(const T *x, const T *bias, T *out, int64_t rows, int64_t cols,
             cudaStream_t stream);
/// out (outer x inner) = x, or T(value) where mask[inner index] != 0.
template <typename T>
void maskedFill(const T *x, const int32_t *mask, T *out, int64_t outer,
                int64_t inner, float value, cudaStream_t stream);
/// out (outer x inner) = mask[inner index] != 0 ? x : y.
template <typename T>
void where(const int32_t *mask, const T *x, const T *y, T *out, int64_t outer,
           int64_t inner, cudaStream_t stream);
/// out[i] = x[i] * (drop ? 0 : scale), drop = rng::bits24(key,
/// counterBase + i) < threshold (Backend::dropout).
template <typename T>
void dropout(const T *x, T *out, int64_t n, uint64_t key, uint64_t counterBase,
             uint32_t threshold, float scale, cudaStream_t stream);
/// RoPE over x and out of [outer, seq, inner, dim] (dim even): the cos /
/// sin table of one [seq, dim / 2] block from vecmath::ropeCosSin (the cpu
/// backend's bits), then one thread per rotated pair.
template <typename T>
void rotaryEmbedding(const T *x, T *out, int64_t outer, int64_t seq,
                     int64_t inner, int64_t dim, double theta,
                     const vecmath::RopeScaling &scaling, bool inverse,
                     cudaStream_t stream);

/// torch.optim.SGD with every scalar already rounded to float, as the cpu
/// backend does.
struct SgdScalars {
  /// unscale: each widened gradient element is multiplied by it (1 / the
  /// loss scale, or 1).
  float negLr, momentum, keep, decay, unscale;
  bool useMomentum, first, nesterov;
};
template <typename T>
void sgdUpdate(T *param, const T *grad, T *momentumBuf, int64_t n,
               const SgdScalars &s, cudaStream_t stream);

/// torch.optim.Adam / AdamW scalars (bias corrections computed in double on
/// the host, then rounded to float).
struct AdamScalars {
  /// unscale as in SgdScalars.
  float unscale;
  float negStepSize, bias2Sqrt, beta1, beta2, oneMinusBeta1, oneMinusBeta2, eps,
      decay, shrink;
  bool decoupled;
};
template <typename T>
void adamUpdate(T *param, const T *grad, T *expAvg, T *expAvgSq, int64_t n,
                const AdamScalars &s, cudaStream_t stream);

/// The master-weight forms (Backend::sgdUpdateMaster / adamUpdateMaster):
/// the float kernels above on the float `master` and states, the gradient
/// (G) widened as it is read, and param (P) = the new master rounded once.
template <typename G, typename P>
void sgdUpdateMaster(P *param, const G *grad, float *master, float *momentumBuf,
                     int64_t n, const SgdScalars &s, cudaStream_t stream);
template <typename G, typename P>
void adamUpdateMaster(P *param, const G *grad, float *master, float *expAvg,
                      float *expAvgSq, int64_t n, const AdamScalars &s,
                      cudaStream_t stream);

/// out[i] = To(float(x[i])): ztrt_cast between two types (one rounding;
/// the backend copies when the types are the same). x and out do not
/// overlap (the entry point checks).
template <typename From, typename To>
void cast(const From *x, To *out, int64_t n, cudaStream_t stream);

/// foundOut[0] = 1 if foundIn[0] != 0 or any x[i] is a NaN or an infinity,
/// else 0 (ztrt_found_nonfinite; foundOut may equal foundIn).
template <typename T>
void foundNonfinite(const T *x, int64_t n, const float *foundIn,
                    float *foundOut, cudaStream_t stream);

/// sumOut[0] = sumIn[0] + sum of x[i]^2, in double, rounded once
/// (ztrt_grad_sq_norm). One block: the summation order depends only on n.
template <typename T>
void gradSqNorm(const T *x, int64_t n, const float *sumIn, float *sumOut,
                cudaStream_t stream);

// --- Rows: normalization, softmax, losses (Rows.cu) --------------------------

template <typename T>
void layerNorm(const T *x, const T *gamma, const T *beta, T *y, int64_t rows,
               int64_t cols, double eps, cudaStream_t stream);
template <typename T>
void layerNormGrad(const T *dy, const T *x, const T *gamma, T *dx, T *dgamma,
                   T *dbeta, int64_t rows, int64_t cols, double eps,
                   cudaStream_t stream);
template <typename T>
void rmsNorm(const T *x, const T *gamma, T *y, int64_t rows, int64_t cols,
             double eps, cudaStream_t stream);
template <typename T>
void rmsNormGrad(const T *dy, const T *x, const T *gamma, T *dx, T *dgamma,
                 int64_t rows, int64_t cols, double eps, cudaStream_t stream);
/// Fused attention's forward on the tensor cores (AttentionForward.cu) for
/// 16-bit T and head dim d of 32 or 64: false, launching nothing, for other
/// shapes (the caller then runs the composed kernels).
template <typename T>
bool attentionForward(const T *q, const T *k, const T *v, T *out, float *lse,
                      int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                      int64_t d, bool causal, float scale,
                      cudaStream_t stream);

/// Its adjoint (AttentionBackward.cu: FlashAttention-2's backward, no
/// atomics): the same shapes; a key / value head's dk and dv sum its
/// `groups` query heads.
template <typename T>
bool attentionBackward(const T *dout, const T *q, const T *k, const T *v,
                       const T *out, const float *lse, T *dq, T *dk, T *dv,
                       int64_t heads, int64_t groups, int64_t tq, int64_t tk,
                       int64_t d, bool causal, float scale,
                       cudaStream_t stream);

/// TensorCore.cuh's instructions run once by one warp, for the conformance
/// suite's layout check (TensorCoreCheck.cu): a (16 x 16) and b (16 x 8,
/// k x n) as T's bits, row-major, c (16 x 8); loaded: 4 x 32 lanes x 4
/// registers (ldmatrix .x4 and .x4.trans of a's quarters, .x2 of b^T,
/// .x2.trans of b); d: 3 x 16 x 8, a b + c with the operands from the
/// documented layouts, through ldmatrix, and b through .trans. Host memory;
/// synchronous.
template <typename T>
void tensorCoreProbe(const uint16_t *a, const uint16_t *b, const float *c,
                     uint32_t *loaded, float *d);

/// With `lse`, also each row's log-sum-exp as float (attention's).
template <typename T>
void softmax(const T *x, T *y, int64_t rows, int64_t cols, bool causal,
             cudaStream_t stream, float *lse = nullptr);
template <typename T>
void softmaxGrad(const T *dy, const T *y, T *dx, int64_t rows, int64_t cols,
                 cudaStream_t stream);
/// cross_entropy and cross_entropy_grad from one log-sum-exp per row. Rows
/// labelled `ignore` count for nothing (ZTRT_NO_IGNORE_INDEX: none). A tile
/// (cross_entropy_tile*) is rows [firstRow, firstRow + rows) of labelRows
/// labels: `labels` holds all of them and the mean's divisor counts them.
template <typename T>
void crossEntropyWithGrad(const T *logits, const int32_t *labels,
                          const float *dloss, float *loss, T *dlogits,
                          int64_t rows, int64_t classes, int64_t ignore,
                          ErrorSlot *error, cudaStream_t stream,
                          int64_t firstRow, int64_t labelRows);
/// The loss is one float whatever T (ztrt_abi.def).
template <typename T>
void crossEntropy(const T *logits, const int32_t *labels, float *loss,
                  int64_t rows, int64_t classes, int64_t ignore,
                  ErrorSlot *error, cudaStream_t stream, int64_t firstRow,
                  int64_t labelRows);
/// `dloss` is device memory (one float), read by the kernel.
template <typename T>
void crossEntropyGrad(const float *dloss, const T *logits,
                      const int32_t *labels, T *dlogits, int64_t rows,
                      int64_t classes, int64_t ignore, ErrorSlot *error,
                      cudaStream_t stream);

// --- Layout and lookups (Layout.cu) ------------------------------------------

constexpr int kMaxDims = 16;

/// out (contiguous, row-major `shape`) element at coordinates c is
/// src[sum_d c[d] * strides[d]]: transpose (permuted strides) and broadcast
/// (stride 0 along broadcast dims).
struct Gather {
  int rank = 0;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
};
/// out = gather(x) * factor; factor == 1 copies bits, otherwise each
/// element is float(double(x) * factor) as on the cpu.
template <typename T>
void gather(const T *x, T *out, const Gather &plan, double factor,
            cudaStream_t stream);

/// A reduction over some dims: output o (row-major over the kept dims)
/// combines the elements at keptOffset(o) + reducedOffset(r) for r over the
/// reduced dims, in that order. Offsets are element strides into the input.
struct Reduction {
  int keptRank = 0, reducedRank = 0;
  int64_t keptShape[kMaxDims], keptStrides[kMaxDims];
  int64_t reducedShape[kMaxDims], reducedStrides[kMaxDims];
  int64_t outputs = 1, reduced = 1;
};
/// ztrt_reduce's kind: sum and mean in double, max in float (NaN wins, and
/// among equal values the first in input order, as on the cpu).
enum class ReduceKind { Sum = 0, Mean = 1, Max = 2 };
template <typename T>
void reduce(const T *x, T *out, const Reduction &plan, ReduceKind kind,
            cudaStream_t stream);
/// The adjoint of a max reduction: `plan` as for reduce; `toOutput` maps x
/// (row-major over its shape) to offsets in y and dy (stride 0 along the
/// reduced dims). dx = dy / ties where x == y, 0 elsewhere; ties are
/// counted per output first.
template <typename T>
void reduceMaxGrad(const T *dy, const T *x, const T *y, T *dx,
                   const Reduction &plan, const Gather &toOutput,
                   cudaStream_t stream);

template <typename T>
void embedding(const T *table, const int32_t *ids, T *out, int64_t nIds,
               int64_t vocab, int64_t dim, ErrorSlot *error,
               cudaStream_t stream);
/// dtable = 0, then every row that occurs in `ids` is the float sum, in
/// index order, of its dy rows: bitwise the cpu backend's result. For
/// T != float the sums accumulate in a float scratch table, rounded to T
/// once at the end (as the cpu backend does).
template <typename T>
void embeddingGrad(const T *dy, const int32_t *ids, T *dtable, int64_t nIds,
                   int64_t vocab, int64_t dim, ErrorSlot *error,
                   cudaStream_t stream);

/// The strided row copy of ztrt_copy_2d (byte strides; rows do not
/// overlap, which the entry point checks).
void copy2d(const void *src, void *dst, int64_t rows, int64_t rowBytes,
            int64_t srcStride, int64_t dstStride, cudaStream_t stream);

} // namespace ztrt::cuda

#endif // ZTRT_BACKENDS_CUDA_KERNELS_H
