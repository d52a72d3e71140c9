"""Cross-stack profiler after RL-Scope (rl-scope §3, Appendix C).

Annotate a training loop with *phases* and nestable *operations* (§3.1)::

    profiler.enable()
    profiler.set_phase("generation 0")
    with profiler.operation("rollout"):
        with profiler.operation("inference"):
            ...
    profiler.disable()
    print(profiler.report(overhead_per_event=per_event).table())

Time is exclusive: each nanosecond of the profiled region goes to the innermost open
operation of the current phase, or to the phase's ``"(other)"`` bucket when none is open,
so the rows sum to the wall time of the region. With ``cuda=True`` on a CUDA machine,
``torch.profiler`` also records GPU kernels, which are attributed to the innermost
operation open when they were launched, under the phase it opened in (§3.2–3.3).

Book-keeping inflates the measured time; ``calibrate`` measures its average cost per
annotation by delta calibration (Appendix C.1), and ``report`` subtracts it where it
occurs (§3.4) and reports the bias against an uninstrumented run (Appendix C.3);
``profiled`` runs a whole training run that way.

The recorder is process-global and single-threaded: annotate from the training thread.
When profiling is off, ``operation`` returns a shared no-op context manager.
"""

from __future__ import annotations

import csv
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

OTHER = "(other)"
Key = tuple[str, str]  # (phase, operation)
T = TypeVar("T")

_NOOP: AbstractContextManager[None] = nullcontext()
_clock = time.perf_counter_ns
_phase = "main"


class _Recording:
    """Exclusive nanoseconds per (phase, operation), charged at every transition."""

    def __init__(self, cuda: bool) -> None:
        self.stack: list[str] = []
        self.ns: defaultdict[Key, int] = defaultdict(int)
        self.calls: defaultdict[Key, int] = defaultdict(int)
        self.nested: defaultdict[Key, int] = defaultdict(int)  # annotations opened inside each key
        self.labels: dict[Key, str] = {}
        self.gpu_us: dict[Key, float] = {}
        self.torch_profiler: torch.profiler.profile | None = None
        if cuda and torch.cuda.is_available():
            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            self.torch_profiler = torch.profiler.profile(activities=activities)
            self.torch_profiler.start()
        self.running = True
        self.start_ns = self.mark = _clock()
        self.end_ns = self.start_ns

    def key(self) -> Key:
        return (_phase, self.stack[-1] if self.stack else OTHER)

    def charge(self, now: int) -> None:
        """Give the time since the last transition to the innermost open operation."""
        self.ns[self.key()] += now - self.mark
        self.mark = now

    def stop(self) -> None:
        self.charge(_clock())
        self.end_ns = self.mark
        self.running = False
        if self.torch_profiler is not None:
            self.torch_profiler.stop()
            owners = {label: key for key, label in self.labels.items()}
            self.gpu_us = attribute_kernels(self.torch_profiler.events(), owners)
            self.torch_profiler = None


class _Operation:
    """One annotated operation (§3.1). The clock is read last on entry and first on exit,
    so the book-keeping of opening and closing it lands in the enclosing bucket."""

    __slots__ = ("_recording", "_name", "_record_function")

    def __init__(self, recording: _Recording, name: str) -> None:
        self._recording = recording
        self._name = name
        self._record_function: torch.profiler.record_function | None = None

    def __enter__(self) -> None:
        rec = self._recording
        parent = rec.key()
        rec.nested[parent] += 1
        rec.stack.append(self._name)
        key = rec.key()
        rec.calls[key] += 1
        if rec.torch_profiler is not None:
            label = rec.labels.setdefault(key, f"rls[{key[0]}] {key[1]}")
            self._record_function = torch.profiler.record_function(label)
            self._record_function.__enter__()
        now = _clock()
        rec.ns[parent] += now - rec.mark
        rec.mark = now

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        now = _clock()
        rec = self._recording
        if not rec.running:
            return
        rec.charge(now)
        if self._record_function is not None:
            self._record_function.__exit__(exc_type, exc, tb)
        rec.stack.pop()


_recording: _Recording | None = None
_last: _Recording | None = None


def operation(name: str) -> AbstractContextManager[None]:
    """Context manager annotating a high-level operation (§3.1); nestable.

    Disabled, this is one global check returning a shared no-op context manager.
    """
    if _recording is None:
        return _NOOP
    return _Operation(_recording, name)


def set_phase(name: str) -> None:
    """Mark the current training phase (§3.1); later time is reported under it."""
    global _phase
    if _recording is not None:
        _recording.charge(_clock())
    _phase = name


def enable(*, cuda: bool = False) -> None:
    """Open a profiled region, in the phase last set (initially ``"main"``). ``cuda=True``
    also records GPU kernels with torch.profiler when CUDA is available (§3.2); otherwise
    the GPU column stays zero."""
    global _recording
    if _recording is not None:
        raise RuntimeError("profiling is already enabled")
    _recording = _Recording(cuda)


def disable() -> None:
    """Close the profiled region; ``report`` then describes it."""
    global _recording, _last
    if _recording is None:
        raise RuntimeError("profiling is not enabled")
    _recording.stop()
    _last, _recording = _recording, None


def calibrate(workload: Callable[[], None], repeats: int = 5, *, cuda: bool = False) -> float:
    """Average book-keeping seconds per annotation, by delta calibration (Appendix C.1).

    Runs ``workload`` ``repeats`` times uninstrumented and instrumented (interleaved) and
    returns (median instrumented − median uninstrumented) / annotations per run, clipped
    at 0. The workload should be deterministic; calibrate once and reuse (§3.4).
    """
    if _recording is not None:
        raise RuntimeError("calibrate() needs profiling disabled")
    plain: list[int] = []
    instrumented: list[int] = []
    events = 0
    for _ in range(repeats):
        start = _clock()
        workload()
        plain.append(_clock() - start)
        enable(cuda=cuda)
        start = _clock()
        workload()
        instrumented.append(_clock() - start)
        disable()
        events = report().events
    if events == 0:
        raise ValueError("the workload annotated no operations")
    delta_ns = statistics.median(instrumented) - statistics.median(plain)
    return max(0.0, delta_ns / events / 1e9)


def attribute_kernels(events: Iterable[FunctionEvent], owners: dict[str, Key]) -> dict[Key, float]:
    """GPU kernel microseconds per (phase, operation) from a torch.profiler trace (§3.3).

    ``owners`` maps record_function labels to keys. Sweeping CPU-side events by time,
    each op's kernels go to the innermost annotation open at the op's start, whichever
    thread launched it (autograd's backward runs on its own thread).
    """
    marks: list[tuple[float, int, Key | None, float]] = []  # (time, 0 close/1 open/2 launch, key, µs)
    for event in events:
        if event.device_type != DeviceType.CPU:
            continue
        key = owners.get(event.name)
        if key is not None:
            marks.append((event.time_range.start, 1, key, 0.0))
            marks.append((event.time_range.end, 0, None, 0.0))
        elif event.kernels:
            marks.append((event.time_range.start, 2, None, sum(k.duration for k in event.kernels)))
    gpu: defaultdict[Key, float] = defaultdict(float)
    stack: list[Key] = []
    for _, kind, key, micros in sorted(marks, key=lambda mark: mark[:2]):
        if kind == 0:
            stack.pop()
        elif kind == 1:
            assert key is not None
            stack.append(key)
        elif stack:
            gpu[stack[-1]] += micros
    return dict(gpu)


@dataclass(frozen=True)
class Row:
    """Exclusive time of one operation in one phase. ``seconds`` is overhead-corrected;
    ``cpu_seconds`` is that time on the CPU thread (Python, backend and CUDA API calls,
    waits included, as RL-Scope counts them); ``gpu_seconds`` is the kernel time launched
    inside it, which runs asynchronously and so overlaps it (§3.3)."""

    phase: str
    operation: str
    calls: int
    seconds: float
    raw_seconds: float
    cpu_seconds: float
    gpu_seconds: float
    share: float  # % of the corrected total


@dataclass(frozen=True)
class Report:
    """A profiled region's time breakdown, corrected for book-keeping (§3.4, Appendix C)."""

    rows: list[Row]
    wall_seconds: float  # the raw profiled region; the rows' raw_seconds sum to it
    events: int  # annotations recorded
    overhead_per_event: float | None  # None: not calibrated, no correction
    uninstrumented_seconds: float | None

    @property
    def total_seconds(self) -> float:
        """Corrected training time: wall time less the book-keeping estimate."""
        return sum(row.seconds for row in self.rows)

    @property
    def bias_percent(self) -> float | None:
        """(corrected − uninstrumented) / uninstrumented × 100 (Appendix C.3), if known."""
        if self.overhead_per_event is None or not self.uninstrumented_seconds:
            return None
        return (self.total_seconds - self.uninstrumented_seconds) / self.uninstrumented_seconds * 100.0

    def table(self) -> str:
        """A markdown table with a summary of the correction."""
        lines = ["| phase | operation | calls | seconds | raw s | cpu s | gpu s | share % |",
                 "|---|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.phase} | {r.operation} | {r.calls} | {r.seconds:.6f} | {r.raw_seconds:.6f} | "
                  f"{r.cpu_seconds:.6f} | {r.gpu_seconds:.6f} | {r.share:.1f} |" for r in self.rows]
        if self.overhead_per_event is None:
            correction = "overhead correction: 0 (not calibrated)"
        else:
            correction = (f"overhead correction: {self.overhead_per_event * 1e6:.3f} µs/event × {self.events} events"
                          f" = {self.wall_seconds - self.total_seconds:.6f} s")
        bias = self.bias_percent
        lines += ["", f"wall {self.wall_seconds:.6f} s; corrected {self.total_seconds:.6f} s; {correction}; "
                  + ("bias unknown" if bias is None else f"bias {bias:+.1f}% vs uninstrumented "
                     f"{self.uninstrumented_seconds:.6f} s")]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        """Plain data (for JSON or an experiment tracker)."""
        return {"rows": [asdict(row) for row in self.rows], "wall_seconds": self.wall_seconds,
                "total_seconds": self.total_seconds, "events": self.events,
                "overhead_per_event": self.overhead_per_event,
                "uninstrumented_seconds": self.uninstrumented_seconds, "bias_percent": self.bias_percent}

    def to_csv(self, path: Path) -> None:
        """One line per row, with a header."""
        with Path(path).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(Row.__dataclass_fields__))
            writer.writeheader()
            writer.writerows(asdict(row) for row in self.rows)

    def plot(self, path: Path) -> None:
        """Stacked bars, one per phase, stacked by operation (RL-Scope's time breakdown)."""
        import matplotlib  # lazily: every command imports this module, few of them plot
        from matplotlib.figure import Figure

        phases = list(dict.fromkeys(row.phase for row in self.rows))
        operations = list(dict.fromkeys(row.operation for row in self.rows))
        seconds = {(row.phase, row.operation): row.seconds for row in self.rows}
        figure = Figure(figsize=(max(4.0, 1.2 * len(phases) + 3.0), 4.5), layout="constrained")
        axes = figure.add_subplot()
        bottom = [0.0] * len(phases)
        colours = matplotlib.colormaps["tab20"]
        for i, op in enumerate(operations):
            heights = [seconds.get((phase, op), 0.0) for phase in phases]
            axes.bar(phases, heights, bottom=bottom, label=op, color=colours(i % 20))
            bottom = [b + h for b, h in zip(bottom, heights)]
        axes.set_xlabel("phase")
        axes.set_ylabel("seconds (overhead-corrected)")
        axes.set_title("Time breakdown by operation")
        axes.legend(title="operation", loc="upper left", bbox_to_anchor=(1.0, 1.0))
        figure.savefig(path, dpi=100)


def report(overhead_per_event: float | None = None, uninstrumented_seconds: float | None = None) -> Report:
    """Breakdown of the last profiled region.

    With ``overhead_per_event`` (from ``calibrate``), each annotation's book-keeping is
    subtracted from the bucket it was opened in (its parent operation, or the phase's
    ``"(other)"``), where it was charged (§3.4). ``uninstrumented_seconds`` is the same
    workload's time without profiling, for the bias of Appendix C.3.
    """
    if _recording is not None:
        raise RuntimeError("call disable() before report()")
    if _last is None:
        raise RuntimeError("nothing has been profiled")
    rec = _last
    per_event = overhead_per_event or 0.0
    keys = list(dict.fromkeys([*rec.ns, *rec.calls]))
    phase_order = {phase: i for i, phase in enumerate(dict.fromkeys(phase for phase, _ in keys))}
    raw = {key: rec.ns.get(key, 0) / 1e9 for key in keys}
    corrected = {key: max(0.0, raw[key] - per_event * rec.nested.get(key, 0)) for key in keys}
    total = sum(corrected.values()) or 1.0
    rows = [Row(phase=key[0], operation=key[1], calls=rec.calls.get(key, 0), seconds=corrected[key],
                raw_seconds=raw[key], cpu_seconds=corrected[key],
                gpu_seconds=rec.gpu_us.get(key, 0.0) / 1e6, share=corrected[key] / total * 100.0)
            for key in sorted(keys, key=lambda key: (phase_order[key[0]], -corrected[key]))]
    return Report(rows=rows, wall_seconds=(rec.end_ns - rec.start_ns) / 1e9, events=sum(rec.nested.values()),
                  overhead_per_event=overhead_per_event, uninstrumented_seconds=uninstrumented_seconds)


@dataclass(frozen=True)
class Profiled:
    """What :func:`profiled` measured besides the run's result."""

    report: Report
    per_event: float
    """Seconds of book-keeping per annotation (delta calibration)."""
    bias_percent: float
    """The correction's bias on real training iterations, median of 3 (Appendix C.3)."""


def _annotations(count: int = 20_000) -> None:
    """A workload that is nothing but annotations, nested two deep (for calibration)."""
    for _ in range(count // 2):
        with operation("calibration"), operation("calibration"):
            pass


def profiled(run: Callable[[], T], iteration: Callable[[], object]) -> tuple[T, Profiled]:
    """Run ``run`` under the profiler (§3), corrected for book-keeping.

    The cost of one annotation does not depend on what it annotates (§3.4), so delta
    calibration (Appendix C.1) times a workload of bare annotations, where the delta is
    large against the noise. The correction's bias (Appendix C.3) is then measured on one
    real training ``iteration`` against an uninstrumented one, since training runs once.
    """
    per_event = calibrate(_annotations, repeats=5)
    biases = []
    for _ in range(3):  # alternate plain and profiled iterations; the median damps noise
        plain = time.perf_counter()
        iteration()
        plain = time.perf_counter() - plain
        enable(cuda=True)
        iteration()
        disable()
        biases.append(report(per_event, uninstrumented_seconds=plain).bias_percent or 0.0)
    bias = statistics.median(biases)
    set_phase("training")
    enable(cuda=True)
    try:
        result = run()
    finally:
        disable()
    return result, Profiled(report(per_event), per_event, bias)
