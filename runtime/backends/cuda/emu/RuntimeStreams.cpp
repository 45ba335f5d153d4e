//===- RuntimeStreams.cpp - The CUDA runtime API: streams, events ===//
//
// Part of ztrain's CUDA emulator (docs/cuda.md#the-cuda-emulator); the
// state it shares with Runtime.cpp is in RuntimeState.h.
//
//===----------------------------------------------------------------------===//

#include "backends/cuda/emu/RuntimeState.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace ztrt::cudaemu;

// --- Streams ----------------------------------------------------------------

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned flags,
                                         int priority) {
  ZTRT_STICKY();
  if (!stream || flags > cudaStreamNonBlocking)
    return fail(cudaErrorInvalidValue);
  auto *s = new Stream;
  s->priority = priority;
  s->device = currentDevice();
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().streams.insert(s);
  }
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithPriority(stream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream)
    return fail(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    if (!registry().streams.erase(stream))
      return fail(cudaErrorInvalidResourceHandle);
  }
  // CUDA returns at once and lets the work finish; so does the worker.
  stream->drain();
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ZTRT_STICKY();
  if (!validStream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  drain(stream);
  return sticky();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  ZTRT_STICKY();
  if (!validStream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  return !stream || stream->idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned flags) {
  ZTRT_STICKY();
  if (!validStream(stream) || !validEvent(event))
    return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> st = event->state;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(st->mutex);
    target = st->recorded; // The most recent record; none: nothing to wait for.
  }
  if (target == 0)
    return cudaSuccess;
  enqueue(stream, [st, target] {
    std::unique_lock<std::mutex> lock(st->mutex);
    st->cv.wait(lock, [&] { return st->completed >= target; });
  });
  return cudaSuccess;
}

// --- Events -----------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags) {
  ZTRT_STICKY();
  if (!event || flags > (cudaEventBlockingSync | cudaEventDisableTiming))
    return fail(cudaErrorInvalidValue);
  auto *e = new Event;
  e->flags = flags;
  e->device = currentDevice();
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().events.insert(e);
  }
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    if (!event || !registry().events.erase(event))
      return fail(cudaErrorInvalidResourceHandle);
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  ZTRT_STICKY();
  if (!validEvent(event) || !validStream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  // As on a GPU: an event and the stream it is recorded on belong to one
  // device (a thread that forgot cudaSetDevice creates them on device 0).
  if (event->device != (stream ? stream->device : currentDevice()))
    return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> st = event->state;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(st->mutex);
    generation = ++st->recorded;
  }
  enqueue(stream, [st, generation] {
    {
      std::lock_guard<std::mutex> lock(st->mutex);
      st->completed = std::max(st->completed, generation);
      st->time = Clock::now();
    }
    st->cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  ZTRT_STICKY();
  if (!validEvent(event))
    return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> st = event->state;
  std::unique_lock<std::mutex> lock(st->mutex);
  const uint64_t target = st->recorded;
  st->cv.wait(lock, [&] { return st->completed >= target; });
  return sticky();
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  ZTRT_STICKY();
  if (!validEvent(event))
    return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(event->state->mutex);
  return event->state->completed >= event->state->recorded ? cudaSuccess
                                                           : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  ZTRT_STICKY();
  if (!ms)
    return fail(cudaErrorInvalidValue);
  if (!validEvent(start) || !validEvent(end) ||
      (start->flags & cudaEventDisableTiming) ||
      (end->flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidResourceHandle);
  Clock::time_point a, b;
  for (auto [e, t] : {std::pair{start, &a}, std::pair{end, &b}}) {
    std::lock_guard<std::mutex> lock(e->state->mutex);
    if (e->state->recorded == 0)
      return fail(cudaErrorInvalidResourceHandle);
    if (e->state->completed < e->state->recorded)
      return fail(cudaErrorNotReady);
    *t = e->state->time;
  }
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return cudaSuccess;
}
