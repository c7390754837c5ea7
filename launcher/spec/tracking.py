"""Experiment trackers' identity for a run (`launcher.tracking`), as environment for its trainers.

The launcher knows what a tracker cannot: the run id (one per launch, kept by every restart and
every Slurm requeue, which start again from the same request), the sweep a run belongs to and
the run folder. So it names the tracker's run instead of letting each start open a new one: a
W&B run id with resume "allow", project, group (the sweep) and name; an MLflow tracking URI
(default: a SQLite database beside the run folder, so the runs of one experiment share it), the
experiment, the run's tag and its sweep's parent; TensorBoard's log dir in the run folder. The
trainer's rank 0 opens the trackers with it (launcher.trainer.tracking); the launcher itself
imports none of them. Pure: names and strings only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Iterable, Mapping, Optional

from launcher.spec.errors import ConfigError

TENSORBOARD, WANDB, MLFLOW = "tensorboard", "wandb", "mlflow"
TRACKERS = (TENSORBOARD, WANDB, MLFLOW)
DEFAULT = (TENSORBOARD,)
# what the trainer imports for each tracker (the preflight asks its interpreter), and how to get it
PACKAGES = {
    TENSORBOARD: ("tensorboardX",),
    WANDB: ("wandb",),
    MLFLOW: ("mlflow", "sqlalchemy", "alembic"),
}  # mlflow-skinny's SQLite store
INSTALL = {
    TENSORBOARD: "pip install 'areal-launch[tensorboard]'",
    WANDB: "pip install 'areal-launch[wandb]'",
    MLFLOW: "pip install 'areal-launch[mlflow]'",
}

ENV_TRACKING = "AREAL_TRACKING"  # the trackers rank 0 writes to, comma-separated ("" none)
ENV_TENSORBOARD_DIR = "AREAL_TENSORBOARD_DIR"
ENV_SWEEP = "AREAL_SWEEP"  # the sweep a run is a point of: W&B's group, MLflow's parent run
ENV_RUN_NAME = "AREAL_RUN_NAME"
# the environment a user may set (shell or launcher.env) that the launcher then leaves alone
USER_KEYS = {
    WANDB: ("WANDB_PROJECT", "WANDB_MODE", "WANDB_ENTITY"),
    MLFLOW: ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"),
}
TENSORBOARD_FOLDER = "tensorboard"
MLFLOW_DB = "mlflow.db"
MLFLOW_RUN_TAG = "areal_launch.run_id"  # MLflow makes its own run ids: ours is a tag
MLFLOW_SWEEP_TAG = "areal_launch.sweep"  # on the sweep's parent run
METRICS_JSONL = "metrics.jsonl"  # every logged step, one JSON object a line: the record
IDENTITY_FILE = "tracking.json"  # where rank 0 says which runs it writes to (status reads it)
PICTURE = "metrics.png"  # the run as a picture (launcher.trainer.plot)
SWEEP_PICTURE = "sweep.png"  # every point of a sweep, in its sweep folder


def check(names: Iterable[object]) -> tuple[str, ...]:
    """`launcher.tracking` as a tuple of known trackers, each once; ConfigError otherwise."""
    out: list[str] = []
    for name in names:
        text = str(name).strip().lower()
        if text not in TRACKERS:
            raise ConfigError(
                f"launcher.tracking: {name!r} is no tracker; choose from "
                f"{', '.join(TRACKERS)} (a list: launcher.tracking=[wandb,mlflow], "
                "or [] for none)"
            )
        if text not in out:
            out.append(text)
    return tuple(out)


def parse(value: str) -> tuple[str, ...]:
    """$AREAL_TRACKING read back."""
    return tuple(t for t in (v.strip() for v in value.split(",")) if t)


@dataclass(frozen=True)
class Identity:
    """Who a run is to its trackers: the same for every start of the run."""

    trackers: tuple[str, ...]
    run_id: str  # the launch's run id (AREAL_LAUNCH_RUN): W&B's run id, MLflow's run tag
    run_dir: str
    name: str  # the run's name in the trackers' UIs
    project: str  # W&B project, MLflow experiment: the experiment_name
    sweep: Optional[str] = None  # the sweep's id when the run is one of its points

    def env(self, given: Mapping[str, str]) -> dict[str, str]:
        """The trainers' environment for it; `given` (the user's own environment, shell and
        launcher.env) keeps its say over USER_KEYS."""
        out = {ENV_TRACKING: ",".join(self.trackers), ENV_RUN_NAME: self.name}
        if self.sweep:
            out[ENV_SWEEP] = self.sweep
        if TENSORBOARD in self.trackers:
            out[ENV_TENSORBOARD_DIR] = str(PurePath(self.run_dir, TENSORBOARD_FOLDER))
        if WANDB in self.trackers:
            out.update(
                WANDB_RUN_ID=self.run_id,
                WANDB_RESUME="allow",
                WANDB_NAME=self.name,
                WANDB_PROJECT=self.project,
                WANDB_DIR=self.run_dir,
            )
            if self.sweep:
                out["WANDB_RUN_GROUP"] = self.sweep
        if MLFLOW in self.trackers:
            db = PurePath(self.run_dir).parent / MLFLOW_DB
            out.update(MLFLOW_TRACKING_URI=f"sqlite:///{db}", MLFLOW_EXPERIMENT_NAME=self.project)
        for tracker in self.trackers:
            for key in USER_KEYS.get(tracker, ()):
                if given.get(key):
                    out[key] = given[key]
        return out


def sweep_id(sweep_dir: str) -> str:
    """A sweep's id from its folder (Hydra's `multirun/<date>/<time>`, its last two parts
    readable, the whole path hashed): the same for every point, different for every sweep."""
    import hashlib  # here: a node agent imports this module and never names a sweep

    path = PurePath(sweep_dir)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:6]
    return "sweep-" + "_".join(path.parts[-2:]) + "-" + digest
