//===- ContextHostStep.cpp - ztrt_ctx: the host optimizer step ------------===//
//
// Part of ztrain's runtime. zero-offload's optimizer step on the host (a
// device backend's host-placed or nvme states): the update in tiles through
// the host step buffer, synchronously or on the host step thread
// (ztrt_update_async / ztrt_update_wait).
//
//===----------------------------------------------------------------------===//

#include "step/Context.h"

#include "backends/cpu/CpuBackend.h"
#include "base/Support.h"
#include "step/ContextImpl.h"

#include <algorithm>
#include <cstdlib>
#include <random>

using namespace ztrt;

namespace {

/// A host step's tile, in elements: the whole update when it fits the
/// buffer (or stages nothing); else half of the buffer (64-byte aligned
/// halves), alternating halves, so that a tile's parameter upload (on a
/// copy stream) overlaps the next tile's download and kernel. The compiler
/// sizes the buffer so (dist::HostStep::bufferBytes). 0: not one element
/// fits. The updates are elementwise: tiles compute the whole update's
/// values.
int64_t hostStepTile(int64_t n, int64_t perElement, int64_t bufferBytes) {
  if (perElement == 0 || n * perElement <= bufferBytes)
    return n;
  return bufferBytes / 2 / 64 * 64 / perElement;
}

} // namespace

bool ztrt_ctx::hostStep(const void *state) const {
  if (impl->hostResident())
    return false;
  const char *base = mappedBase(state);
  if (!base)
    return false;
  auto it = live.find(const_cast<char *>(base));
  return it != live.end() &&
         (it->second.category == ZTRT_CAT_HOST_STATES ||
          it->second.category == ZTRT_CAT_STATE_SWAP_BUFFERS);
}

void ztrt_ctx::runHostStep(void *param, DType paramType, const void *grad,
                           DType gradType, int64_t n, bool writesParamOnly,
                           const HostKernel &kernel, const char *op,
                           bool async) {
  auto job = std::make_shared<HostStepJob>();
  job->param = param;
  job->paramType = paramType;
  job->grad = grad;
  job->gradType = gradType;
  job->n = n;
  job->writesParamOnly = writesParamOnly;
  job->kernel = kernel;
  job->op = op;
  // A gradient the step spilled to host memory (zero-offload's
  // host_gradients) is read where it is.
  const bool gradOnHost = job->gradOnHost = hostGradient(grad);
  const bool paramOnHost = job->paramOnHost = mappedHost(param);
  const int64_t gradElem = elementBytes(gradType);
  const int64_t paramElem = elementBytes(paramType);
  const int64_t perElement =
      (gradOnHost ? 0 : gradElem) + (paramOnHost ? 0 : paramElem);
  if (n > 0 && hostStepTile(n, perElement, hostStepBufferBytes) < 1)
    fatal("%s: the host step needs %lld bytes of staging per element, the "
          "host step buffer has %lld bytes (the descriptor's "
          "host_step_buffer record is missing or too small)",
          op, static_cast<long long>(perElement),
          static_cast<long long>(hostStepBufferBytes));
  if (!hostKernels) {
    hostKernels = createCpuBackend();
    if (hostStepThreads > 0)
      hostKernels->setThreads(hostStepThreads);
  }
  // The host-link bytes, counted here (on the step's thread) for both
  // forms: the gradient down unless spilled, the parameter down unless
  // host-placed or only written, and up unless host-placed.
  if (!gradOnHost)
    offload.deviceToHostBytes += n * gradElem;
  if (!paramOnHost) {
    if (!writesParamOnly)
      offload.deviceToHostBytes += n * paramElem;
    offload.hostToDeviceBytes += n * paramElem;
  }
  ++offload.hostSteps;
  if (async) {
    ++offload.asyncHostSteps;
    // After this point of the compute stream the gradient is final (a
    // spill has landed: its wait came before the update) and nothing
    // issued earlier reads the parameter's old values any more.
    job->ready = impl->recordFence();
    std::lock_guard<std::mutex> lock(hostStepMutex);
    if (!hostStepThread.joinable())
      hostStepThread = std::thread([this] { hostStepThreadMain(); });
    hostStepJobs.push_back(job);
    hostStepQueue.push_back(job);
    hostStepWork.notify_one();
    return;
  }
  // The buffer and the kernels are this thread's once the host step
  // thread is done.
  drainHostSteps();
  const Clock::time_point begin = Clock::now();
  runHostStepTiles(*job, false);
  offload.hostStepNanos += nanosBetween(begin, Clock::now());
}

void ztrt_ctx::runHostStepTiles(HostStepJob &job, bool async) {
  const bool gradOnHost = job.gradOnHost;
  const bool paramOnHost = job.paramOnHost;
  const int64_t gradElem = elementBytes(job.gradType);
  const int64_t paramElem = elementBytes(job.paramType);
  const int64_t perElement =
      (gradOnHost ? 0 : gradElem) + (paramOnHost ? 0 : paramElem);
  const int64_t n = job.n;
  const int64_t half = hostStepBufferBytes / 2 / 64 * 64;
  const int64_t tile = hostStepTile(n, perElement, hostStepBufferBytes);
  if (async) {
    // Host backends never get here. The compute stream reaches the
    // update's call: a spilled gradient is in host memory, a device one is
    // final. (The host step's time starts there.)
    impl->awaitFence(job.ready);
    job.begin = Clock::now();
  } else {
    // The previous host step's uploads read the buffer until they are
    // done.
    awaitHostStepUploads();
    if (gradOnHost) {
      // Its copy was enqueued on the copy stream as the gradient was made,
      // and the compute stream waits for it (ztrt_copy_wait): done once
      // the compute stream is.
      impl->synchronize();
    }
  }
  char *buffer = static_cast<char *>(hostStepBuffer);
  int64_t last = -1;
  for (int64_t offset = 0, index = 0; offset < n; offset += tile, ++index) {
    const int64_t count = std::min(tile, n - offset);
    const int h = static_cast<int>(index % 2);
    char *staging = tile < n ? buffer + h * half : buffer;
    // That half's upload of two tiles ago (or of an earlier update) still
    // reads it; a whole update uses the whole buffer: the other half's
    // too. (Nothing staged, nothing to wait for.)
    for (int k : {h, 1 - h})
      if (perElement > 0 && (k == h || tile >= n) &&
          hostStepUploads[k] >= 0) {
        impl->awaitFence(hostStepUploads[k]);
        hostStepUploads[k] = -1;
      }
    const void *hostGrad =
        static_cast<const char *>(job.grad) + offset * gradElem;
    if (!gradOnHost) {
      // Gradients down. Synchronously: waits for the kernels that made
      // this one (the compute stream runs everything issued before it).
      // Asynchronously: on the copy stream, the compute stream went past
      // the update's call already (nvme-placed states, whose gradient the
      // plan keeps on the device until the update's wait).
      if (async)
        impl->awaitFence(impl->copyToHostOnCopyStream(
            staging, hostGrad, count * gradElem, -1,
            Backend::kHostStepLane));
      else
        impl->copyToHost(staging, hostGrad, count * gradElem);
      hostGrad = staging;
    }
    char *deviceParam = static_cast<char *>(job.param) + offset * paramElem;
    void *hostParam = deviceParam;
    if (!paramOnHost) {
      hostParam = staging + (gradOnHost ? 0 : count * gradElem);
      if (!job.writesParamOnly) {
        if (async) {
          // On the copy stream: the compute stream went past the update's
          // call already, and later work does not write the parameter.
          impl->awaitFence(impl->copyToHostOnCopyStream(
              hostParam, deviceParam, count * paramElem, -1,
              Backend::kHostStepLane));
        } else {
          impl->copyToHost(hostParam, deviceParam, count * paramElem);
        }
      }
    }
    if (async) {
      job.kernel(*hostKernels, hostParam, hostGrad, offset, count);
    } else {
      TraceScope scope(trace(), "host step");
      job.kernel(*hostKernels, hostParam, hostGrad, offset, count);
    }
    if (!paramOnHost) {
      // Parameters up, on the copy stream, after the work issued so far
      // (whatever still reads the old values); an asynchronous step's
      // readers are after its ztrt_update_wait.
      int64_t ready = -1;
      if (!async) {
        ready = impl->recordFence();
        noteCopy(ready);
      }
      last = hostStepUploads[h] = impl->copyFromHostOnCopyStream(
          deviceParam, hostParam, count * paramElem, ready,
          async ? Backend::kHostStepLane : 0);
    }
  }
  job.lastUpload = last;
  // The work issued next reads the new values: the compute stream waits
  // for the last upload (the copy stream runs them in order); an
  // asynchronous step's wait is its ztrt_update_wait's.
  if (!async && last >= 0)
    impl->waitFenceOnDevice(last);
}

void ztrt_ctx::hostStepThreadMain() {
  // ZTRT_HOST_STEP_DELAY_US (tests): each host step starts after a random
  // delay of up to that many microseconds, as a slow host would make it,
  // so that a reader the waits fail to order after it sees stale values.
  const char *delayText = std::getenv("ZTRT_HOST_STEP_DELAY_US");
  const long long maxDelay = delayText ? std::atoll(delayText) : 0;
  std::minstd_rand delays(static_cast<unsigned>(maxDelay));
  // The rank's device for the copies and fences made here, and --threads
  // for the kernels' loops (OpenMP's thread count is per thread).
  impl->bindThread();
  if (hostStepThreads > 0)
    hostKernels->adoptThreads(hostStepThreads);
  std::unique_lock<std::mutex> lock(hostStepMutex);
  for (;;) {
    hostStepWork.wait(lock,
                      [&] { return hostStepStop || !hostStepQueue.empty(); });
    if (hostStepQueue.empty())
      return;
    std::shared_ptr<HostStepJob> job = hostStepQueue.front();
    hostStepQueue.erase(hostStepQueue.begin());
    hostStepBusy = true;
    lock.unlock();
    if (maxDelay > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(
          static_cast<long long>(delays() % (maxDelay + 1))));
    runHostStepTiles(*job, true);
    job->end = Clock::now();
    lock.lock();
    job->done = true;
    hostStepBusy = false;
    hostStepDone.notify_all();
  }
}

void ztrt_ctx::drainHostSteps() {
  std::unique_lock<std::mutex> lock(hostStepMutex);
  hostStepDone.wait(lock,
                    [&] { return hostStepQueue.empty() && !hostStepBusy; });
}

void ztrt_ctx::markUpdateAsync(const void *param, const char *op) {
  if (asyncNext)
    fatal("%s: ztrt_update_async of the parameter at %p follows one of the "
          "parameter at %p with no update between",
          op, param, asyncNext);
  // A host backend runs every update where it is, synchronously.
  if (!impl->hostResident())
    asyncNext = param;
}

bool ztrt_ctx::takeUpdateAsync(const void *param, const char *op) {
  const void *announced = asyncNext;
  asyncNext = nullptr;
  if (announced && announced != param)
    fatal("%s: ztrt_update_async named the parameter at %p, the update is "
          "of the parameter at %p (the call must come right before its "
          "update)",
          op, announced, param);
  return announced != nullptr;
}

void ztrt_ctx::waitUpdate(const void *param) {
  std::shared_ptr<HostStepJob> job;
  {
    std::unique_lock<std::mutex> lock(hostStepMutex);
    auto it = std::find_if(hostStepJobs.begin(), hostStepJobs.end(),
                           [&](const auto &j) { return j->param == param; });
    if (it == hostStepJobs.end())
      return;
    job = *it;
    const Clock::time_point begin = Clock::now();
    hostStepDone.wait(lock, [&] { return job->done; });
    // (Only this thread adds and removes jobs: `it` is still valid.)
    hostStepJobs.erase(it);
    offload.updateWaitNanos += nanosBetween(begin, Clock::now());
    offload.hostStepNanos += nanosBetween(job->begin, job->end);
    if (Trace *t = trace()) {
      TraceEvent wait(TraceEvent::Type::UpdateWait);
      wait.begin = begin;
      wait.end = Clock::now();
      t->add(wait);
      TraceEvent step(TraceEvent::Type::HostStep);
      step.name = job->op;
      step.begin = job->begin;
      step.end = job->end;
      step.elems = job->n;
      t->add(step);
    }
  }
  // The parameter's readers, issued next, see the new values.
  if (job->lastUpload >= 0)
    impl->waitFenceOnDevice(job->lastUpload);
}

void ztrt_ctx::requireUpdatesWaited(const char *when) {
  std::lock_guard<std::mutex> lock(hostStepMutex);
  if (asyncNext)
    fatal("%s: ztrt_update_async of the parameter at %p was not followed "
          "by its update",
          when, asyncNext);
  if (!hostStepJobs.empty())
    fatal("%s: the %s of the parameter at %p ran asynchronously but was "
          "never waited (ztrt_update_wait; %zu outstanding)",
          when, hostStepJobs.front()->op, hostStepJobs.front()->param,
          hostStepJobs.size());
}

size_t ztrt_ctx::pendingHostSteps() const {
  std::lock_guard<std::mutex> lock(hostStepMutex);
  return hostStepJobs.size();
}

void ztrt_ctx::awaitHostStepUploads() {
  for (int64_t &fence : hostStepUploads)
    if (fence >= 0) {
      impl->awaitFence(fence);
      fence = -1;
    }
}
