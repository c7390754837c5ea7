"""areal-launch's Hydra launcher: `hydra/launcher=areal` (the default of `areal-launch -m`)
runs each sweep point on the runner its own `launcher=` selects; `areal_<runner>` (areal_local,
areal_slurm, and one for each runner in launcher.runners.launcher.spec.registry.RUNNERS) runs every
point on that one.

Hydra hands `launch()` a whole batch of points at once (hydra-submitit-launcher's shape); we
compose each the way Hydra's BasicLauncher does (the sweep's config plus the point's overrides,
job number set) and launcher.cli.sweep plans and rehearses the whole batch before the first point
starts, then runs it. Each JobReturn carries the run's objective for the sweeper. Only this
module is imported when Hydra scans its plugins; the launcher's own modules load on launch.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from launcher import runners


@dataclass
class ArealLauncherConf:
    _target_: str = "hydra_plugins.areal_launch.areal_launcher.ArealLauncher"
    runner: Optional[str] = None  # None: each point's own launcher= choice


ConfigStore.instance().store(
    group="hydra/launcher", name="areal", node=ArealLauncherConf, provider="areal-launch"
)
for _name in runners.names():
    ConfigStore.instance().store(
        group="hydra/launcher",
        name=f"areal_{_name}",
        node=ArealLauncherConf(runner=_name),
        provider="areal-launch",
    )


class ArealLauncher(Launcher):
    def __init__(self, runner: Optional[str] = None) -> None:
        self.runner = runner
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        import sys

        from launcher.cli.sweep import RECORD, follow_sweeper

        self.config, self.hydra_context = config, hydra_context
        RECORD.before_sweeper(Path(str(config.hydra.sweep.dir)))  # what exists before it writes
        warning = follow_sweeper(config.hydra.sweeper)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from launcher.cli.sweep import Point, labels, run_batch

        assert self.config is not None
        given = [str(o) for o in self.config.hydra.overrides.task]
        points = [
            Point(initial_job_idx + i, tuple(o), label)
            for i, (o, label) in enumerate(zip(job_overrides, labels(job_overrides, given)))
        ]
        return [self._job_return(o) for o in run_batch(points, self._compose)]

    def _compose(self, point: Any) -> DictConfig:
        """The point's config as Hydra's BasicLauncher composes it; with `areal_<runner>`, the
        runner chosen for it unless the point chose another one itself."""
        from launcher.spec.errors import UserError

        assert self.config is not None and self.hydra_context is not None
        overrides = list(point.overrides)
        cfg = self._load(overrides, point.index)
        chosen = runners.name_of(cfg.launcher)
        if self.runner is not None and chosen != self.runner:
            if any(o.partition("=")[0].lstrip("+") == "launcher" for o in overrides):
                raise UserError(
                    f"hydra/launcher=areal_{self.runner} runs points with "
                    f"launcher={self.runner}, this one chose launcher={chosen}"
                )
            cfg = self._load(overrides + [f"launcher={self.runner}"], point.index)
        return cfg

    def _load(self, overrides: List[str], index: int) -> DictConfig:
        from launcher.cli.sweep import RECORD
        from launcher.config.compose import Composer

        assert self.config is not None and self.hydra_context is not None
        loader, master = self.hydra_context.config_loader, self.config
        composer = RECORD.composer or Composer()
        cfg = composer.explained(lambda: loader.load_sweep_config(master, overrides), overrides)
        with open_dict(cfg):
            cfg.hydra.job.id = index
            cfg.hydra.job.num = index
        return cfg

    @staticmethod
    def _job_return(outcome: Any) -> JobReturn:
        """COMPLETED with the objective, or FAILED with the run's exit (a sweeper raises it,
        or, like Optuna's, counts a failed trial)."""
        from launcher.cli.sweep import RunFailed
        from launcher.config.compose import TASK_NAME

        ret = JobReturn(
            overrides=list(outcome.point.overrides),
            task_name=TASK_NAME,
            working_dir=str(outcome.run_dir),
        )
        if outcome.code == 0:
            ret.status, ret.return_value = JobStatus.COMPLETED, outcome.objective
        else:
            ret.status, ret.return_value = JobStatus.FAILED, RunFailed(outcome)
        return ret
