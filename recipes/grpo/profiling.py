"""`cluster.profiling` in the default recipe, as the plan carries it (launcher.spec.profiling):
on each trainer rank of a profiled component, each named step (every step when none is named)
is recorded from its rollout to its weight push (the inference job: its forward pass).

    torch    torch.profiler's chrome trace (CPU, and CUDA on GPUs), one file per rank per
             step: <output_dir>/<component>-rank<r>-step<s>.json
    nsight   the launcher ran this job under `nsys profile` gated on the CUDA profiler API:
             the recipe opens nsys's capture window around the step (cudaProfilerStart/Stop)

(Named so, not `profile`: train.py runs as a script, its folder first on sys.path, and a
`profile` there would shadow the standard library's, which torch imports.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from launcher.spec.process import ENV_COMPONENT
from launcher.spec.profiling import NSIGHT, TORCH, Profiling
from launcher.trainer.runtime import RuntimePlan


@dataclass
class StepProfiler:
    """Records the steps the plan names on this rank (`record` None: nothing is recorded)."""

    record: Optional[Profiling]
    component: str
    rank: int
    cuda: bool
    say: Callable[[str], None]

    @classmethod
    def from_plan(
        cls, rt: RuntimePlan, component: str, rank: int, device: torch.device, say: Callable
    ) -> "StepProfiler":
        """This job's share of the plan's profiling: its component (a shared job's `actor,ref`
        counts for each) named, or nothing."""
        record = Profiling.of_plan(rt.meta)
        job = str(rt.env.get(ENV_COMPONENT) or component)
        if record is not None and not record.covers(job):
            record = None
        return cls(record, component, rank, device.type == "cuda", say)

    def start(self, step: int) -> Any:
        """Begin recording `step` if it is named; what `stop` takes (None: not recorded)."""
        if self.record is None or not self.record.at(step):
            return None
        if self.record.backend == NSIGHT:
            if self.cuda:
                torch.cuda.profiler.start()
            return NSIGHT
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(activities=activities, record_shapes=False)
        profiler.start()
        return profiler

    def stop(self, step: int, recording: Any) -> None:
        """End recording `step`: the trace written (torch), the capture window closed (nsight)."""
        if recording is None or self.record is None:
            return
        if isinstance(recording, str):  # nsight's window
            if self.cuda:
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
            return
        assert self.record.backend == TORCH
        recording.stop()
        path = Path(self.record.trace_path(self.component, self.rank, step))
        path.parent.mkdir(parents=True, exist_ok=True)
        recording.export_chrome_trace(str(path))
        if self.rank == 0:
            self.say(f"grpo: step {step} profiled (torch.profiler): {path.parent}")
