//===- Driver.cpp - What a compiled model's main() does -------------------===//
//
// Part of ztrain's runtime.
//
//===----------------------------------------------------------------------===//

#include "step/Driver.h"

#include "base/Rng.h"
#include "base/Support.h"
#include "cli/Options.h"
#include "cli/RunConfig.h"
#include "cli/TrainingSettings.h"
#include "comm/Communicator.h"
#include "io/Checkpoint.h"
#include "io/Data.h"
#include "io/Weights.h"
#include "report/Report.h"
#include "report/Trace.h"
#include "step/Context.h"
#include "step/Descriptor.h"
#include "step/Init.h"
#include "step/Setup.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <vector>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

namespace ztrt {

namespace {

/// The mean of one value per rank, summed in rank order in float and divided
/// by the number of ranks in float: the same on every rank, and the value
/// itself in a world of one.
float meanOverRanks(Communicator &comm, float value) {
  std::vector<float> values(static_cast<size_t>(comm.count()));
  comm.allGather(&value, values.data(), 1, sizeof(value));
  float sum = values[0];
  for (size_t r = 1; r < values.size(); ++r)
    sum += values[r];
  return sum / static_cast<float>(values.size());
}

} // namespace

/// The step the collective watchdog names in its message.
std::atomic<int64_t> watchdogStep{0};

int runMain(int argc, char **argv, const char *descriptor, StepFn step,
            StepFn eval, StepFn logitsFn) {
  // Past the file-size limit (ulimit -f) a write fails with EFBIG instead of
  // killing the process with SIGXFSZ: the writer's error removes its
  // temporary file and says which file could not be written.
  std::signal(SIGXFSZ, SIG_IGN);
  std::unique_ptr<Communicator> world = Communicator::initWorld(&argc, &argv);
  const int rank = world->rank(), ranks = world->count();
  reportTermination(&watchdogStep);
  Options opts = parseOptions(argc, argv, rank);
  if (opts.ranksPerNode > 0) {
    if (ranks % opts.ranksPerNode != 0)
      refuse("--ranks-per-node %lld does not divide the %d ranks into nodes",
             static_cast<long long>(opts.ranksPerNode), ranks);
    world->setRanksPerNode(static_cast<int>(opts.ranksPerNode));
  }
  Descriptor desc = parseDescriptor(descriptor);
  if (desc.gridSize > 0 && desc.gridSize != ranks)
    refuse("the model was compiled for dp=%lld ranks but was launched on "
           "%d (compile with --dp=%d, or launch %lld ranks)",
           static_cast<long long>(desc.gridSize), ranks, ranks,
           static_cast<long long>(desc.gridSize));
  // Shards must cover their tensors on the ranks there are. The parser
  // checks that against a grid record; without one this is the first point
  // at which the number of ranks is known.
  checkStorage(desc, ranks);
  checkBackendRunsModel(desc, opts);
  // (Also one rank under a launcher: the watchdog ends it if the launcher
  // is gone.)
  if (ranks > 1 || launchedByMpi())
    startCollectiveWatchdog(opts.collectiveTimeout, &watchdogStep);
  checkMemory(*world, desc, opts);

  // A resumed run continues the checkpoint's data stream, so its seed must
  // be known before the data source opens. Rank 0 alone checks the index
  // against this model, so that a mismatch is one line; the other ranks
  // wait at the barrier until the check passes or rank 0's error aborts the
  // job, and then read the index it accepted.
  // How --data is read, as checkpoints record it.
  std::string dataFormatText;
  if (!opts.data.empty()) {
    // The file first (createDataSource's order): a device or a missing
    // file is named as such before its name is read for a format. Rank 0
    // first, so that a bad --data is one line (its error ends the job
    // while the others wait).
    auto identify = [&] {
      uint64_t size = 0;
      ::close(openInputFile(opts.data, "--data", size));
      dataFormatText =
          dataFormatName(resolveDataFormat(opts.data, opts.dataFormat));
    };
    if (rank == 0)
      identify();
    if (ranks > 1)
      world->barrier();
    if (rank != 0)
      identify();
  }
  const std::string dataOrderText =
      opts.data.empty() ? ""
      : opts.dataOrder == DataOrder::Random ? "random"
                                            : "sequential";
  CheckpointIndex resumed;
  if (!opts.resume.empty()) {
    if (rank == 0) {
      resumed = readCheckpointIndex(opts.resume, "--resume");
      checkResumable(resumed, desc, descriptor, ranks);
      // --steps 0 trains nothing: sampling or evaluating a checkpoint
      // needs none of its training data.
      if (opts.steps > 0)
        checkResumedData(resumed, opts.data, dataFormatText, dataOrderText,
                         opts.resume);
      if (opts.seedGiven && opts.seed != resumed.seed)
        fatal("--resume '%s': the checkpoint was trained with --seed %llu, "
              "this run has --seed %llu (leave --seed out to continue its "
              "data)",
              opts.resume.c_str(),
              static_cast<unsigned long long>(resumed.seed),
              static_cast<unsigned long long>(opts.seed));
    }
    world->barrier();
    if (rank != 0)
      resumed = readCheckpointIndex(opts.resume, "--resume");
    opts.seed = resumed.seed;
    // The schedule and hyper-parameters continue as the run set them,
    // except where this run's flags (or --config) say otherwise.
    const std::string restored =
        continueTrainingSettings(resumed.run, opts, opts.resume);
    // What this command line changed must fit what it continues (a
    // schedule the checkpoint recorded as it ran is taken as it is).
    const bool changed = opts.trainingSet.count("--warmup-steps") ||
                         opts.trainingSet.count("--lr-decay-steps");
    if (std::string problem = scheduleProblem(opts.lr);
        changed && !problem.empty())
      fatal("--resume '%s': with the checkpoint's schedule, %s",
            opts.resume.c_str(), problem.c_str());
    for (const char *flag : {"--min-lr", "--lr-decay-steps"})
      if (opts.lr.kind == LrSchedule::Kind::Constant &&
          opts.trainingSet.count(flag))
        fatal("--resume '%s': flag %s shapes a decaying schedule; the "
              "checkpoint's and this run's --lr-schedule is constant (add "
              "--lr-schedule=cosine or linear)",
              opts.resume.c_str(), flag);
    if (rank == 0 && !restored.empty() && opts.logEvery > 0) {
      std::printf("resuming with the checkpoint's %s (flags given here "
                  "replace them)\n",
                  restored.c_str());
      std::fflush(stdout);
    }
  }

  std::unique_ptr<Backend> impl = createBackend(opts.backend, *world);
  ztrt_ctx ctx(std::move(impl), std::move(world));
  // Hybrid sharding: the shard and replicate groups, on the nodes
  // --ranks-per-node laid out (applied above).
  if (desc.hasMesh) {
    ctx.setMesh(desc.meshShard, desc.meshReplicate);
    ctx.statesOverWorld = desc.meshSecondary;
    if (rank == 0)
      noteMeshLayout(ctx.comm(), desc);
  }
  ctx.seed = opts.seed;
  if (desc.lossScale)
    ctx.scaler.emplace(*desc.lossScale);
  ctx.clipMaxNorm = desc.clipGradNorm;
  ctx.lrSchedule = opts.lr;
  checkHyperOverrides(desc, opts);
  if (!opts.configPath.empty())
    checkConfigAgainstBuild(desc, opts, opts.configPath);
  ctx.hyperOverrides = opts.hypers;
  if (opts.gradAccumSteps > 0 && desc.gradAccumSteps == 0 &&
      opts.gradAccumSteps != 1)
    refuse("--grad-accum-steps %lld: this model was compiled without "
           "gradient accumulation (recompile with ztrain-compile "
           "--grad-accum-steps=K)",
           static_cast<long long>(opts.gradAccumSteps));
  if (desc.gradAccumSteps > 0)
    ctx.accumSteps =
        opts.gradAccumSteps > 0 ? opts.gradAccumSteps : desc.gradAccumSteps;
  // The samples an optimizer step consumes: ranks x micro-batch x
  // micro-batches. A run resumed with another global batch (other ranks,
  // micro-batch or --grad-accum-steps) shifts its sample indices so that
  // its data continues where the checkpoint's stopped.
  int64_t globalBatch = ranks * std::max<int64_t>(1, ctx.accumSteps);
  for (const InputSpec &in : desc.inputs)
    if (!in.shape.empty()) {
      globalBatch *= in.shape[0];
      break;
    }
  int64_t rowShift = 0;
  if (!opts.resume.empty()) {
    const int64_t consumed = resumed.dataSamples >= 0
                                 ? resumed.dataSamples
                                 : resumed.step * checkpointGlobalBatch(resumed);
    rowShift = consumed - resumed.step * globalBatch;
    const int64_t before = checkpointGlobalBatch(resumed);
    if (rank == 0 && before != globalBatch && opts.logEvery > 0) {
      std::printf("resuming with %lld samples per optimizer step (the "
                  "checkpoint's run took %lld): the data continues at "
                  "sample %lld\n",
                  static_cast<long long>(globalBatch),
                  static_cast<long long>(before),
                  static_cast<long long>(consumed));
      std::fflush(stdout);
    }
  }
  Backend &backend = ctx.backend();
  Communicator &comm = ctx.comm();
  checkDeviceMemory(backend, comm, desc, opts);
  // A large model takes seconds to allocate and initialize: say so first.
  if (rank == 0 && plannedBytes(desc).total() >= (int64_t(1) << 30)) {
    double params = 0.0;
    for (const ParamSpec &spec : desc.params)
      params += static_cast<double>(spec.numel);
    std::printf("starting: %.1fM parameters (%s), %s per rank planned; "
                "initializing\n",
                params / 1e6, precisionText(desc).c_str(),
                formatBytes(static_cast<uint64_t>(plannedBytes(desc).total()))
                    .c_str());
    std::fflush(stdout);
  }
  if (opts.threads > 0)
    backend.setThreads(opts.threads);
  ctx.hostStepThreads = opts.threads;
  if (!opts.trace.empty()) {
    // Every rank takes its time origin as it leaves this barrier, so the
    // ranks' traces line up to within the barrier's skew.
    comm.barrier();
    ctx.enableTrace();
  }

  // Outputs are checked before the first step, so that an unwritable path
  // does not surface after the whole run.
  if (rank == 0) {
    if (!opts.save.empty())
      checkOutputPath(opts.save, "--save");
    if (!opts.report.empty())
      checkOutputPath(opts.report, "--report");
    if (!opts.saveCheckpoint.empty()) {
      checkOutputDirectory(opts.saveCheckpoint, "--save-checkpoint");
      // One writer per checkpoint directory (rank 0 speaks for its job): a
      // second run started on it is refused now, not a silent mixture of
      // two runs' steps later. A directory the first save creates is
      // locked there.
      struct stat info;
      if (::stat(opts.saveCheckpoint.c_str(), &info) == 0)
        lockOutputDirectory(opts.saveCheckpoint, "--save-checkpoint");
    }
  }
  if (!opts.trace.empty())
    checkOutputPath(traceFilePath(opts.trace, rank, ranks), "--trace");

  // Open the data before allocating anything: a bad file fails in
  // milliseconds, not after initialising a large model.
  std::optional<DataFingerprint> dataPrint;
  if (!opts.data.empty() && rank == 0 && !opts.saveCheckpoint.empty())
    dataPrint = dataFingerprint(opts.data);
  if (!opts.evalData.empty() && (!desc.hasEval || !eval))
    refuse("--eval-data: this model was compiled without evaluation "
           "(ztrain-compile --eval=false); recompile without it");
  std::unique_ptr<DataSource> data, evalSource;
  auto openData = [&] {
    data = createDataSource(desc, opts.data, opts.seed, rank, ranks,
                            opts.dataFormat, opts.dataOrder, rowShift);
    if (!opts.evalData.empty())
      evalSource = createDataSource(desc, opts.evalData, opts.seed, rank,
                                    ranks, opts.dataFormat, opts.dataOrder,
                                    /*rowShift=*/0, "--eval-data");
  };
  // Every rank reads the same files: rank 0 opens them first, so that a
  // bad file is one line (rank 0's, whose error ends the job while the
  // others wait here), not one per rank (issue 49).
  if (rank == 0)
    openData();
  if (ranks > 1)
    comm.barrier();
  if (rank != 0)
    openData();

  // Parameters and states take their per-rank storage (E elements), which
  // is what the compiler's memory prediction counts.
  setUpOffload(ctx, desc, opts, rank);
  for (const ParamSpec &spec : desc.params)
    ctx.params.push_back(
        spec.space == MemorySpace::Nvme // in its swap file
            ? nullptr
            : ctx.allocate(spec.storeBytes,
                           spec.space == MemorySpace::Host
                               ? ZTRT_CAT_HOST_PARAMETERS
                               : ZTRT_CAT_PARAMETERS,
                           ("param '" + spec.name + "'").c_str()));
  for (size_t i = 0; i < desc.states.size(); ++i) {
    const StateSpec &spec = desc.states[i];
    std::vector<char> zeros(static_cast<size_t>(spec.storeBytes), 0);
    if (spec.space == MemorySpace::Nvme) {
      // Its file starts as zeros too (the master's values come below).
      ctx.states.push_back(nullptr);
      ctx.stateFromHost(i, zeros.data(), spec.storeBytes);
      continue;
    }
    void *ptr = ctx.allocate(spec.storeBytes,
                             spec.space == MemorySpace::Host
                                 ? ZTRT_CAT_HOST_STATES
                                 : ZTRT_CAT_OPTIMIZER_STATES,
                             ("state '" + spec.name + "'").c_str());
    ctx.states.push_back(ptr);
    // (Host memory on a device backend: written by the host.)
    ctx.stateFromHost(i, zeros.data(), spec.storeBytes);
  }
  if (!backend.hostResident()) {
    ctx.hostStepBufferBytes = desc.hostStepBuffer;
    if (ctx.hostStepBufferBytes)
      ctx.hostStepBuffer =
          ctx.allocate(ctx.hostStepBufferBytes, ZTRT_CAT_HOST_STEP_BUFFERS,
                       "host step buffer");
  }
  if (!desc.grads.empty() && desc.grads.size() != desc.params.size())
    fatal("descriptor: %zu gradient records for %zu parameters",
          desc.grads.size(), desc.params.size());
  // A gradient of 0 elements lives in the step's arena (zero-offload).
  for (const GradSpec &spec : desc.grads)
    ctx.grads.push_back(
        spec.elements == 0
            ? nullptr
            : ctx.allocate(spec.bytes(), ZTRT_CAT_GRADIENTS,
                           ("gradient of '" +
                            desc.params[spec.paramIndex].name + "'")
                               .c_str()));
  for (const InputSpec &spec : desc.inputs)
    ctx.inputs.push_back(ctx.allocate(spec.bytes, ZTRT_CAT_OTHER,
                                      ("input '" + spec.name + "'").c_str()));
  for (const BufferSpec &spec : desc.buffers)
    ctx.buffers.push_back(ctx.allocate(spec.bytes, ZTRT_CAT_BUFFERS,
                                       ("buffer '" + spec.name + "'").c_str()));
  if (opts.resume.empty()) {
    // The same --init file on every rank: rank 0 reads first, so that a
    // missing or mis-shaped tensor is one line, not one per rank.
    if (rank == 0)
      initParams(ctx, desc, opts);
    if (ranks > 1 && !opts.init.empty())
      comm.barrier();
    if (rank != 0)
      initParams(ctx, desc, opts);
  } else
    loadCheckpointShard(ctx, desc, resumed);

  // Steps are numbered as if the run had never stopped: the data of step t,
  // Adam's bias correction (1 - beta^t) and SGD's first-step momentum all
  // depend on t, so a resumed run computes exactly what an uninterrupted
  // one would.
  const int64_t first = resumed.step + 1, last = resumed.step + opts.steps;
  if (ctx.lrSchedule.decaySteps == 0)
    ctx.lrSchedule.decaySteps = last;
  auto checkpoint = [&](int64_t done) {
    CheckpointProgress progress{done, opts.seed, opts.data, std::nullopt,
                                ctx.accumSteps, dataPrint, dataFormatText,
                                dataOrderText, rowShift + done * globalBatch,
                                trainingSettings(ctx.lrSchedule,
                                                 ctx.hyperOverrides)};
    if (ctx.scaler)
      progress.lossScaler = ctx.scaler->state();
    saveCheckpoint(ctx, desc, descriptor, progress, opts.saveCheckpoint,
                   opts.keepCheckpoints);
  };
  std::vector<std::vector<char>> staging;
  for (const InputSpec &spec : desc.inputs)
    staging.emplace_back(static_cast<size_t>(spec.bytes));
  int width = static_cast<int>(std::to_string(last).size());
  std::vector<StepRecord> records;
  // Evaluation after step t: the same --eval-steps batches every time (so
  // the numbers compare across the run), forward only; the mean loss over
  // them and over the ranks.
  std::vector<std::pair<int64_t, float>> evals;
  auto evaluate = [&](int64_t t) {
    double sum = 0.0;
    for (int64_t u = 1; u <= opts.evalSteps; ++u) {
      for (size_t i = 0; i < desc.inputs.size(); ++i) {
        evalSource->fill(u, i, staging[i].data());
        backend.copyFromHost(ctx.inputs[i], staging[i].data(),
                             desc.inputs[i].bytes);
      }
      ctx.lossSet = false;
      eval(&ctx);
      ctx.synchronize();
      ctx.requireCollectivesWaited("evaluation", t);
      if (!ctx.lossSet)
        fatal("evaluation after step %lld: the model did not report a loss",
              static_cast<long long>(t));
      sum += ctx.loss;
    }
    const float loss = meanOverRanks(
        comm, static_cast<float>(sum / static_cast<double>(opts.evalSteps)));
    evals.push_back({t, loss});
    if (rank == 0 && opts.logEvery > 0) {
      std::printf("eval %*lld/%lld  loss %.7g  (%lld batch%s)\n", width,
                  static_cast<long long>(t), static_cast<long long>(last),
                  loss, static_cast<long long>(opts.evalSteps),
                  opts.evalSteps == 1 ? "" : "es");
      std::fflush(stdout);
    }
  };

  // Gradient accumulation: each optimizer step runs the compiled step once
  // per micro-batch; the last one's call runs the updates.
  const int64_t micro = std::max<int64_t>(1, ctx.accumSteps);

  // Throughput in the progress line: tokens per second for a language
  // model (inputs tokens, targets: i32 [B, T]), achieved TFLOP/s per rank
  // from the compiler's matmul FLOP count (and MFU against --peak-tflops),
  // and the time left, from the mean of this run's steps after its first.
  const bool tokenModel = desc.inputs.size() == 2 &&
                          desc.inputs[0].type == ElemType::I32 &&
                          desc.inputs[0].shape.size() == 2 &&
                          desc.inputs[0].shape == desc.inputs[1].shape;
  const double tokensPerStep =
      tokenModel ? static_cast<double>(desc.inputs[0].numel) * ranks * micro
                 : 0.0;
  const double flopsPerStep = static_cast<double>(desc.flopsPerStep) * micro;
  // The MFU's denominator: --peak-tflops, else the peak the device reports
  // for the parameters' precision (16-bit parameters: 16-bit GEMMs).
  Backend::PeakRate peak{opts.peakTflops, "--peak-tflops"};
  if (peak.tflops <= 0.0) {
    const bool sixteenBit =
        std::any_of(desc.params.begin(), desc.params.end(),
                    [](const ParamSpec &p) {
                      return p.type == ElemType::BF16 ||
                             p.type == ElemType::F16;
                    });
    peak = backend.peakRate(sixteenBit);
    if (rank == 0 && opts.logEvery > 0 && flopsPerStep > 0.0 &&
        peak.tflops > 0.0) {
      std::printf("MFU against the device's peak of %.4g TFLOP/s (%s; "
                  "--peak-tflops sets another)\n",
                  peak.tflops, peak.basis.c_str());
      std::fflush(stdout);
    }
  }
  double steadyMs = 0.0;
  int64_t steadySteps = 0;
  auto throughputText = [&](int64_t t, double ms) {
    std::string s;
    if (tokensPerStep > 0.0 && ms > 0.0) {
      const double rate = tokensPerStep / (ms / 1e3);
      s += rate >= 1e6   ? format("  %.2fM tok/s", rate / 1e6)
           : rate >= 1e3 ? format("  %.1fk tok/s", rate / 1e3)
                         : format("  %.0f tok/s", rate);
    }
    if (flopsPerStep > 0.0 && ms > 0.0) {
      const double tflops = flopsPerStep / (ms / 1e3) / 1e12;
      s += format("  %.3g TFLOP/s", tflops);
      if (peak.tflops > 0.0)
        s += format(" (MFU %.1f%%)", 100.0 * tflops / peak.tflops);
    }
    if (steadySteps > 0 && t < last) {
      const double left =
          steadyMs / static_cast<double>(steadySteps) * (last - t) / 1e3;
      if (left >= 1.0) {
        const long long secs = std::llround(left);
        s += secs >= 3600 ? format("  ETA %lldh%02lldm", secs / 3600,
                                   secs / 60 % 60)
             : secs >= 60 ? format("  ETA %lldm%02llds", secs / 60, secs % 60)
                          : format("  ETA %llds", secs);
      }
    }
    return s;
  };
  for (int64_t t = first; t <= last; ++t) {
    ctx.step = t;
    watchdogStep.store(t);
    ctx.stepScale = ctx.scaler ? ctx.scaler->scale() : 1.0;
    ctx.scaleUpdated = ctx.skipUpdates = false;
    ctx.clipChecked = false;
    ctx.clipCoef = 1.0;
    ctx.gradNorm = ctx.stepLr = std::nan("");
    double lossSum = 0.0;
    auto start = Clock::now();
    for (int64_t m = 1; m <= micro; ++m) {
      // Data follows the micro-batch: K micro-batches of B rows read the
      // rows one step of K * B rows would.
      ctx.microStep = m;
      ctx.microBatch = ctx.accumSteps > 0 ? (t - 1) * micro + m : t;
      for (size_t i = 0; i < desc.inputs.size(); ++i) {
        data->fill(ctx.microBatch, i, staging[i].data());
        backend.copyFromHost(ctx.inputs[i], staging[i].data(),
                             desc.inputs[i].bytes);
      }
      ctx.lossSet = false;
      ctx.boundaryAsked = false;
      step(&ctx);
      // The step owns its asynchronous host steps too.
      ctx.requireUpdatesWaited(
          format("step %lld", static_cast<long long>(t)).c_str());
      // A device backend has only enqueued the step: its time, its loss and
      // errors its kernels found are known once the device has run it.
      ctx.synchronize();
      // The step owns its collectives; the driver's own exchanges below
      // must find the communication thread idle.
      ctx.requireCollectivesWaited("step", t);
      if (!ctx.lossSet)
        fatal("step %lld: the model did not report a loss (ztrt_set_loss)",
              static_cast<long long>(t));
      if (ctx.accumSteps > 0 && !ctx.boundaryAsked)
        fatal("step %lld: the model accumulates gradients but did not ask "
              "for the boundary (ztrt_accumulation_boundary)",
              static_cast<long long>(t));
      lossSum += ctx.loss;
    }
    auto end = Clock::now();
    if (Trace *trace = ctx.trace()) {
      TraceEvent event(TraceEvent::Type::Step);
      event.begin = start;
      event.end = end;
      event.value = t;
      trace->add(event);
    }
    if (ctx.clipMaxNorm && !ctx.clipChecked)
      fatal("step %lld: the model clips its gradients but did not compute "
            "their norm (ztrt_clip_grad_norm)",
            static_cast<long long>(t));
    if (ctx.scaler && !ctx.scaleUpdated)
      fatal("step %lld: the model scales its loss but did not check its "
            "gradients (ztrt_update_loss_scale)",
            static_cast<long long>(t));
    double ms = std::chrono::duration<double, std::milli>(end - start).count();
    // The step's loss: the mean over its micro-batches (the loss of one
    // batch of K * B rows); exactly the step's loss without accumulation.
    const float rankLoss = static_cast<float>(lossSum / static_cast<double>(micro));
    // The driver's own exchange, not the model's traffic: it is not counted
    // in the communication statistics.
    float meanLoss = meanOverRanks(comm, rankLoss);
    records.push_back({t, rankLoss, meanLoss, ms,
                       ctx.scaler ? ctx.stepScale : 0.0, ctx.skipUpdates,
                       ctx.gradNorm, ctx.stepLr});
    // A non-finite loss is where training went wrong: stop there, naming
    // it. Every rank has the same mean: rank 0 reports, all stop.
    if (!std::isfinite(meanLoss) && !opts.allowNonfiniteLoss)
      refuse("step %lld: the loss is %s; stopping (--allow-nonfinite-loss "
            "trains on)",
            static_cast<long long>(t), std::isnan(meanLoss) ? "NaN" : "infinite");
    // Every step after the run's first (which warms caches and threads)
    // enters the ETA's mean, logged or not.
    if (t > first) {
      steadyMs += ms;
      ++steadySteps;
    }
    if (rank == 0 && opts.logEvery > 0 &&
        (t % opts.logEvery == 0 || t == last)) {
      std::string scale;
      if (ctx.lrSchedule.visible() && std::isfinite(ctx.stepLr))
        scale += format("  lr %.4g", ctx.stepLr);
      if (ctx.clipMaxNorm)
        scale += format("  grad norm %.4g", ctx.gradNorm);
      if (ctx.scaler)
        scale += format("  loss scale %.17g%s", ctx.stepScale,
                       ctx.skipUpdates ? " (overflow: step skipped)" : "");
      scale += throughputText(t, ms);
      std::printf("step %*lld/%lld  loss %.7g  %.2f ms/step%s\n", width,
                  static_cast<long long>(t), static_cast<long long>(last),
                  meanLoss, ms, scale.c_str());
      std::fflush(stdout);
    }
    if (evalSource &&
        (t == last || (opts.evalEvery > 0 && t % opts.evalEvery == 0)))
      evaluate(t);
    // The last step's checkpoint is the one written below.
    if (opts.checkpointEvery > 0 && t % opts.checkpointEvery == 0 && t != last)
      checkpoint(t);
  }

  // --steps 0 with --eval-data evaluates the weights as they are (an
  // --init file or a --resume checkpoint).
  if (evalSource && first > last)
    evaluate(last);
  // Nothing but steps starts collectives; this covers --steps 0 too.
  ctx.requireCollectivesWaited("before saving");
  if (!opts.save.empty())
    saveParams(ctx, desc, opts.save);
  if (!opts.saveCheckpoint.empty())
    checkpoint(last);
  if (!opts.report.empty()) {
    std::vector<std::string> perRank =
        comm.gatherToRoot(rankJson(ctx, desc, rank, records));
    if (rank == 0)
      writeReport(opts.report, ctx, desc, records, evals, backend.threads(),
                  ranks, perRank, peak);
  }
  // Sampling (--sample): a byte-level language model continues the prompt,
  // one forward pass of the logits function per token (the context is the
  // last T tokens, in row 0 of the batch; causal attention makes the
  // positions after it irrelevant). Every rank computes the same logits and
  // draws the same token from the same seeded stream; rank 0 prints.
  if (opts.sampleGiven) {
    if (!tokenModel)
      refuse("--sample needs a language model with inputs (tokens, targets), "
             "both i32 [B, T]");
    if (!desc.logits || !logitsFn)
      refuse("--sample: this model has no logits function (its loss is not "
             "a cross-entropy of logits, or it was compiled with --eval=false "
             "or --loss-tile-bytes)");
    const int64_t B = desc.inputs[0].shape[0], T = desc.inputs[0].shape[1];
    const TensorSpec &ls = *desc.logits;
    const int64_t V = ls.shape.empty() ? 0 : ls.shape.back();
    if (V <= 0 || ls.numel != B * T * V)
      refuse("--sample: the logits [%s] are not [B*T, V] of the inputs' "
             "[%lld, %lld]",
             formatShape(ls.shape).c_str(), static_cast<long long>(B),
             static_cast<long long>(T));
    const int64_t bound = desc.inputs[0].bound > 0 ? desc.inputs[0].bound : V;
    // Text (bytes as tokens) or ids; ids in and out when given as ids.
    const bool asIds = !opts.sampleIds.empty();
    if (asIds && !opts.sample.empty())
      refuse("--sample and --sample-ids exclude each other");
    std::vector<int32_t> tokens;
    for (unsigned char c : opts.sample) {
      if (c >= bound)
        refuse("--sample: byte %u of the prompt is not a token of this "
               "model's vocabulary of %lld",
               static_cast<unsigned>(c), static_cast<long long>(bound));
      tokens.push_back(c);
    }
    for (int64_t id : opts.sampleIds) {
      if (id >= bound)
        refuse("--sample-ids: %lld is not a token of this model's vocabulary "
               "of %lld",
               static_cast<long long>(id), static_cast<long long>(bound));
      tokens.push_back(static_cast<int32_t>(id));
    }
    if (tokens.empty())
      refuse("--sample: the prompt is empty");
    const uint64_t key = rng::streamKey(opts.seed, "sample");
    std::vector<char> host(static_cast<size_t>(ls.bytes));
    std::vector<float> row(static_cast<size_t>(V));
    std::string text = opts.sample;
    for (int64_t i = 0; i < opts.sampleTokens; ++i) {
      const int64_t n = std::min<int64_t>(T, tokens.size());
      std::vector<int32_t> in(static_cast<size_t>(B * T), 0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < n; ++j)
          in[b * T + j] = tokens[tokens.size() - n + j];
      backend.copyFromHost(ctx.inputs[0], in.data(), desc.inputs[0].bytes);
      std::fill(in.begin(), in.end(), 0);
      backend.copyFromHost(ctx.inputs[1], in.data(), desc.inputs[1].bytes);
      ctx.outputSet = false;
      logitsFn(&ctx);
      ctx.synchronize();
      ctx.requireCollectivesWaited("sampling");
      if (!ctx.outputSet || ctx.outputElems != ls.numel)
        fatal("sampling: the logits function did not hand over its %lld "
              "logits (ztrt_set_output)",
              static_cast<long long>(ls.numel));
      backend.copyToHost(host.data(), ctx.output, ls.bytes);
      convertElements(ls.type,
                      host.data() + (n - 1) * V * ls.elemBytes(),
                      ElemType::F32, row.data(), V);
      int64_t next = 0;
      if (opts.temperature == 0.0) {
        next = std::max_element(row.begin(), row.end()) - row.begin();
      } else {
        // The top-k logits (ties: the lower id first), softmax at the
        // temperature in double, one uniform draw.
        std::vector<int64_t> ids(static_cast<size_t>(V));
        for (int64_t v = 0; v < V; ++v)
          ids[v] = v;
        const int64_t k = opts.topK > 0 ? std::min(opts.topK, V) : V;
        std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                          [&](int64_t a, int64_t b) {
                            return row[a] != row[b] ? row[a] > row[b] : a < b;
                          });
        std::vector<double> p(static_cast<size_t>(k));
        double total = 0.0;
        for (int64_t j = 0; j < k; ++j)
          total += p[j] = std::exp((row[ids[j]] - row[ids[0]]) /
                                   opts.temperature);
        const double u = static_cast<double>(rng::draw(key, i) >> 11) *
                         0x1p-53 * total;
        double acc = 0.0;
        next = ids[k - 1];
        for (int64_t j = 0; j < k; ++j)
          if ((acc += p[j]) > u) {
            next = ids[j];
            break;
          }
      }
      tokens.push_back(static_cast<int32_t>(next));
      text += static_cast<char>(next);
    }
    if (asIds) {
      text.clear();
      for (size_t j = 0; j < tokens.size(); ++j)
        text += (j ? " " : "") + std::to_string(tokens[j]);
    }
    if (rank == 0) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
  }

  // Each rank its own file, no communication: written last, so that a
  // failed save or report leaves no trace file either.
  if (Trace *trace = ctx.trace())
    trace->write(traceFilePath(opts.trace, rank, ranks), rank, ranks);
  return 0;
}

} // namespace ztrt
