//===- Trace.h - Chrome trace-event recording -------------------*- C++ -*-===//
//
// `--trace FILE` records what a rank did, as Chrome trace-event JSON (the
// format Perfetto and chrome://tracing open): one process per rank, a
// "compute" track (tid 1: every kernel call, each step around them, each
// wait for a collective) and a "communication" track (tid 2: each
// collective, from the moment the communication thread began it to its
// end).
//
// Everything is recorded on the step thread, without locks: kernel calls
// and waits happen there, and a collective's event is recorded when the
// step waits for it (its start and end times travel with its result). When
// tracing is off the context holds no Trace and the only cost of a kernel
// call is the test of a null pointer.
//
//===----------------------------------------------------------------------===//

#ifndef ZTRT_REPORT_TRACE_H
#define ZTRT_REPORT_TRACE_H

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ztrt {

using Clock = std::chrono::steady_clock;

/// The thread ids of the two tracks in the trace file.
constexpr int kComputeTrack = 1;
constexpr int kCommunicationTrack = 2;
/// zero-offload's swaps and host copies (present when the run has them).
/// Transfers overlap (several are in flight), and a track's slices must
/// nest or be disjoint, so they are laid out on as many I/O lanes as the
/// most in flight at once: the first is kIoTrack ("io"), lane k > 0 is
/// kIoLaneTracks + k ("io 2", "io 3", ...), all sorted beside it.
constexpr int kIoTrack = 3;
constexpr int kHostStepTrack = 4;
constexpr int kIoLaneTracks = 100;

struct TraceEvent {
  enum class Type : uint8_t {
    /// A kernel call on the compute track, named by its op.
    Kernel,
    /// One training step on the compute track ("step <value>").
    Step,
    /// A ztrt_wait on the compute track (args: handle `value`, `kind`).
    Wait,
    /// A synchronous collective on the compute track, named by its op: the
    /// time the step was blocked in it (args: handle `value`, `kind`).
    SyncCollective,
    /// A collective on the communication track, named by its kind (args:
    /// handle `value`, elements, bytes, wire bytes).
    Collective,
    /// A swap transfer on the I/O track, named by `name` (swap_in or
    /// swap_out): from its issue to the ztrt_swap_wait that found it done
    /// (args: ticket `value`, optimizer state index `elems`, bytes); or a
    /// host copy (gradient_to_host, activation_to_host,
    /// activation_from_host), from its start to its ztrt_copy_wait
    /// (`elems` -1).
    Io,
    /// A ztrt_swap_wait on the compute track: the time the step was
    /// blocked on a swap (args: ticket `value`).
    SwapWait,
    /// An asynchronous host step on the host step track, named by its op
    /// (adam_update, ...): from the thread taking it to its upload
    /// enqueued (args: elements `elems`).
    HostStep,
    /// A ztrt_update_wait on the compute track: the time the step was
    /// blocked on an asynchronous host step.
    UpdateWait,
  };
  explicit TraceEvent(Type type) : type(type) {}

  Type type;
  /// The collective kind (a ztrt::Collective) of the last three types.
  uint8_t kind = 0;
  /// The op of Kernel and SyncCollective: a string literal.
  const char *name = nullptr;
  Clock::time_point begin, end;
  /// The step number of a Step, the collective's handle otherwise.
  int64_t value = 0;
  int64_t elems = 0, bytes = 0, wireBytes = 0;
};

class Trace {
public:
  /// Recording stops here (about 64 MB of events); later events are
  /// counted and dropped, and the file says how many ("dropped_events").
  static constexpr size_t kMaxEvents = 1000000;

  /// Timestamps in the file are microseconds since `origin`. `maxEvents`
  /// is the cap (tests lower it).
  explicit Trace(Clock::time_point origin, size_t maxEvents = kMaxEvents)
      : origin(origin), maxEvents(maxEvents) {}

  void add(const TraceEvent &event) {
    if (events.size() < maxEvents)
      events.push_back(event);
    else
      ++dropped;
  }
  void kernel(const char *op, Clock::time_point begin, Clock::time_point end) {
    TraceEvent event(TraceEvent::Type::Kernel);
    event.name = op;
    event.begin = begin;
    event.end = end;
    add(event);
  }

  size_t size() const { return events.size(); }
  int64_t droppedEvents() const { return dropped; }

  /// Writes the trace of rank `rank` of `worldSize` to `path`, atomically.
  void write(const std::string &path, int rank, int worldSize) const;

private:
  Clock::time_point origin;
  size_t maxEvents;
  std::vector<TraceEvent> events;
  int64_t dropped = 0;
};

/// The file rank `rank` of `worldSize` writes for --trace FILE: FILE itself
/// in a world of one, else FILE with ".rank<r>" before the extension of its
/// last path component (trace.json -> trace.rank0.json; trace ->
/// trace.rank0; a leading dot does not start an extension).
std::string traceFilePath(const std::string &file, int rank, int worldSize);

/// Records one kernel call (the lifetime of the scope) when `trace` is not
/// null; otherwise costs one branch.
class TraceScope {
public:
  TraceScope(Trace *trace, const char *op) : trace(trace), op(op) {
    if (__builtin_expect(trace != nullptr, 0))
      begin = Clock::now();
  }
  ~TraceScope() {
    if (__builtin_expect(trace != nullptr, 0))
      trace->kernel(op, begin, Clock::now());
  }
  TraceScope(const TraceScope &) = delete;
  TraceScope &operator=(const TraceScope &) = delete;

private:
  Trace *trace;
  const char *op;
  Clock::time_point begin;
};

} // namespace ztrt

#endif // ZTRT_REPORT_TRACE_H
