//===- Trace.cpp - Chrome trace-event recording ---------------------------===//
//
// Part of ztrain's runtime.
//
// The file is the JSON object form of the trace-event format:
// {"displayTimeUnit": "ms", "traceEvents": [...], "otherData": {...}}, with
// metadata events naming the process ("rank r") and the two threads, then
// complete events ("ph": "X") sorted by start time, longer first, so that a
// step precedes the kernels inside it.
//
//===----------------------------------------------------------------------===//

#include "report/Trace.h"

#include "step/Context.h"
#include "base/Json.h"
#include "base/Support.h"

#include <algorithm>

namespace ztrt {

namespace {

/// Microseconds since the origin with nanosecond digits, printed from the
/// integer so that nested events keep their exact order and containment
/// (a double would be just as exact here, but this needs no reasoning).
std::string micros(int64_t nanos) {
  if (nanos < 0)
    nanos = 0;
  return format("%lld.%03lld", static_cast<long long>(nanos / 1000),
                static_cast<long long>(nanos % 1000));
}

int64_t nanosBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from)
      .count();
}

} // namespace

void Trace::write(const std::string &path, int rank, int worldSize) const {
  std::vector<const TraceEvent *> sorted;
  sorted.reserve(events.size());
  for (const TraceEvent &event : events)
    sorted.push_back(&event);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const TraceEvent *a, const TraceEvent *b) {
                     if (a->begin != b->begin)
                       return a->begin < b->begin;
                     return a->end > b->end;
                   });

  AtomicFile file(path);
  // displayTimeUnit first: Perfetto applies it only when it comes before
  // the events (it is the viewer's unit; ts and dur are microseconds).
  std::string out = "{\"displayTimeUnit\": \"ms\",\n\"traceEvents\": [\n";
  out += format("  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                "\"tid\": 0, \"args\": {\"name\": \"rank %d\"}},\n",
                rank, rank);
  out += format("  {\"name\": \"process_sort_index\", \"ph\": \"M\", "
                "\"pid\": %d, \"tid\": 0, \"args\": {\"sort_index\": %d}},\n",
                rank, rank);
  // I/O lanes: each transfer, in start order, on the first lane whose last
  // transfer has ended (greedy interval colouring: as many lanes as the
  // most transfers in flight at once).
  std::vector<int> ioLane(sorted.size(), 0);
  std::vector<Clock::time_point> laneEnds;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i]->type != TraceEvent::Type::Io)
      continue;
    size_t lane = 0;
    while (lane < laneEnds.size() && laneEnds[lane] > sorted[i]->begin)
      ++lane;
    if (lane == laneEnds.size())
      laneEnds.push_back(sorted[i]->end);
    else
      laneEnds[lane] = sorted[i]->end;
    ioLane[i] = static_cast<int>(lane);
  }
  auto ioTrack = [](size_t lane) {
    return lane == 0 ? kIoTrack : kIoLaneTracks + static_cast<int>(lane);
  };
  struct Track {
    int tid, sortIndex;
    std::string name;
  };
  std::vector<Track> tracks = {{kComputeTrack, kComputeTrack, "compute"},
                               {kCommunicationTrack, kCommunicationTrack,
                                "communication"}};
  for (size_t lane = 0; lane < laneEnds.size(); ++lane)
    tracks.push_back({ioTrack(lane), kIoTrack,
                      lane == 0 ? std::string("io")
                                : "io " + std::to_string(lane + 1)});
  // The host step track exists when updates ran on the host step thread.
  if (std::any_of(events.begin(), events.end(), [](const auto &e) {
        return e.type == TraceEvent::Type::HostStep;
      }))
    tracks.push_back({kHostStepTrack, kHostStepTrack, "host step"});
  for (size_t t = 0; t < tracks.size(); ++t) {
    out += format("  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, "
                  "\"tid\": %d, \"args\": {\"name\": \"%s\"}},\n",
                  rank, tracks[t].tid, tracks[t].name.c_str());
    out += format("  {\"name\": \"thread_sort_index\", \"ph\": \"M\", "
                  "\"pid\": %d, \"tid\": %d, \"args\": {\"sort_index\": %d}}",
                  rank, tracks[t].tid, tracks[t].sortIndex);
    out += t + 1 == tracks.size() && sorted.empty() ? "\n" : ",\n";
  }
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TraceEvent &e = *sorted[i];
    const int64_t ts = nanosBetween(origin, e.begin);
    const int64_t dur = std::max<int64_t>(nanosBetween(e.begin, e.end), 0);
    const char *kind = collectiveName(static_cast<Collective>(e.kind));
    std::string name, args;
    int tid = kComputeTrack;
    switch (e.type) {
    case TraceEvent::Type::Kernel:
      name = e.name;
      break;
    case TraceEvent::Type::Step:
      name = format("step %lld", static_cast<long long>(e.value));
      break;
    case TraceEvent::Type::Wait:
    case TraceEvent::Type::SyncCollective:
      // A synchronous collective's entry point blocks the step thread for
      // the whole collective: "sync all_reduce", beside the collective's
      // own event ("all_reduce") on the communication track.
      name = e.type == TraceEvent::Type::Wait ? std::string("wait")
                                              : std::string("sync ") + e.name;
      args = format(", \"args\": {\"handle\": %lld, \"kind\": \"%s\"}",
                    static_cast<long long>(e.value), kind);
      break;
    case TraceEvent::Type::Collective:
      name = kind;
      tid = kCommunicationTrack;
      args = format(
          ", \"args\": {\"handle\": %lld, \"elements\": %lld, "
          "\"bytes\": %lld, \"wire_bytes\": %lld}",
          static_cast<long long>(e.value), static_cast<long long>(e.elems),
          static_cast<long long>(e.bytes), static_cast<long long>(e.wireBytes));
      break;
    case TraceEvent::Type::Io:
      name = e.name;
      tid = ioTrack(static_cast<size_t>(ioLane[i]));
      args = format(", \"args\": {\"ticket\": %lld, \"state\": %lld, "
                    "\"bytes\": %lld}",
                    static_cast<long long>(e.value),
                    static_cast<long long>(e.elems),
                    static_cast<long long>(e.bytes));
      break;
    case TraceEvent::Type::HostStep:
      name = e.name;
      tid = kHostStepTrack;
      args = format(", \"args\": {\"elements\": %lld}",
                    static_cast<long long>(e.elems));
      break;
    case TraceEvent::Type::UpdateWait:
      name = "update wait";
      break;
    case TraceEvent::Type::SwapWait:
      name = "swap wait";
      args = format(", \"args\": {\"ticket\": %lld}",
                    static_cast<long long>(e.value));
      break;
    }
    out += format("  {\"name\": %s, \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                  "\"ts\": %s, \"dur\": %s%s}%s\n",
                  jsonQuote(name).c_str(), rank, tid, micros(ts).c_str(),
                  micros(dur).c_str(), args.c_str(),
                  i + 1 < sorted.size() ? "," : "");
    // Hand the text over in pieces: a full trace is ~100 MB of JSON.
    if (out.size() >= (1u << 20)) {
      file.write(out.data(), out.size());
      out.clear();
    }
  }
  out += format("],\n\"otherData\": {\"rank\": %d, \"world_size\": %d, "
                "\"dropped_events\": %lld}}\n",
                rank, worldSize, static_cast<long long>(dropped));
  file.write(out.data(), out.size());
  file.commit();
}

std::string traceFilePath(const std::string &file, int rank, int worldSize) {
  if (worldSize <= 1)
    return file;
  const std::string suffix = ".rank" + std::to_string(rank);
  const size_t slash = file.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = file.rfind('.');
  // An extension is a dot inside the last component, not its first
  // character (".trace" is a hidden file without one).
  if (dot == std::string::npos || dot <= base)
    return file + suffix;
  return file.substr(0, dot) + suffix + file.substr(dot);
}

} // namespace ztrt
