"""Rank 0's experiment trackers: `rt.log(metrics, step)` lands in each tracker of
`launcher.tracking` and in `<run folder>/metrics.jsonl` (docs/architecture.md §16).

The launcher named the runs (launcher.spec.tracking: W&B run id, MLflow run tag and sweep,
TensorBoard dir); this module opens them on the first `log` of each start of the trainer and
continues them: W&B resumes its run id, MLflow finds its run by tag (and a sweep point its
sweep's parent run, made once under a file lock), TensorBoard writes a new event file into the
same folder; SIGTERM (a job's other rank failed) closes them first. One step axis over every
restart and requeue: `metrics.jsonl` is the record of
what was logged, written after the trackers; a step it holds is not logged again (a restart
re-does the steps after its checkpoint), and TensorBoard is told to purge what lies beyond it
(a start that died between the trackers and the record). Each tracker's package is imported
here, in the trainer, on first use; the launcher's preflight made sure it is installed.
`tracking.json` in the run folder says where each run is, for `areal-launch status`.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol

from launcher.spec import tracking as spec
from launcher.spec.errors import LaunchError
from launcher.spec.process import ENV_RUN_MARKER


class Writer(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record of `<run folder>/metrics.jsonl`, in order (a torn last line is skipped)."""
    try:
        lines = (Path(run_dir) / spec.METRICS_JSONL).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            out.append(record)
    return out


def read_identity(run_dir: str | Path) -> dict[str, Any]:
    """What `tracking.json` says about the trackers' runs ({} when none was opened)."""
    try:
        data = json.loads((Path(run_dir) / spec.IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Trackers:
    """The trackers of one start of a trainer (rank 0); `log` opens them on first use."""

    def __init__(self, env: Mapping[str, str], run_dir: str, restart: int = 0):
        self.env, self.run_dir, self.restart = env, Path(run_dir), restart
        self.names = spec.parse(env.get(spec.ENV_TRACKING, ""))
        self.logged = {r["step"] for r in read_metrics(run_dir)}
        self.writers: dict[str, Writer] = {}
        self.closes_on_sigterm = False
        self.is_open = False

    def log(self, metrics: Mapping[str, Any], step: int) -> bool:
        """Write one step everywhere; False (nothing written) when the step was logged before."""
        step = int(step)
        if step in self.logged:
            return False
        values = {
            str(k): float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
        }
        if not self.is_open:
            self._open()
        for writer in self.writers.values():
            writer.log(values, step)
        record = {"step": step, "time": round(time.time(), 3), "restart": self.restart, **values}
        with open(self.run_dir / spec.METRICS_JSONL, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
        self.logged.add(step)
        return True

    def close(self) -> None:
        """Close every tracker (W&B's service keeps what it holds only then); a later `log`
        opens them again, continuing the same runs."""
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()
        self.is_open = False

    def _open(self) -> None:
        purge = max(self.logged) + 1 if self.logged else None
        openers: dict[str, Callable[[], Writer]] = {
            spec.TENSORBOARD: lambda: TensorBoard(self.env, purge, self.restart),
            spec.WANDB: lambda: WandB(self.env, self.run_dir),
            spec.MLFLOW: lambda: MLflow(self.env),
        }
        where = read_identity(self.run_dir)
        for name in self.names:
            writer = openers[name]()
            self.writers[name] = writer
            where[name] = getattr(writer, "where", {})
        self._close_on_sigterm()
        part = self.run_dir / f".{spec.IDENTITY_FILE}.part"
        part.write_text(json.dumps(where, indent=1) + "\n")
        os.replace(part, self.run_dir / spec.IDENTITY_FILE)
        self.is_open = True

    def _close_on_sigterm(self) -> None:
        """torchrun stops a job's other ranks with SIGTERM when one fails (so do the launcher
        and Slurm): close the trackers first, or W&B's service drops what it still holds
        (a Python exception is atexit's, and W&B's own, business). Then SIGTERM goes on as
        before: the previous handler, or the default death."""
        if self.closes_on_sigterm or threading.current_thread() is not threading.main_thread():
            return
        self.closes_on_sigterm = True
        previous = signal.getsignal(signal.SIGTERM)

        def closing(signum: int, frame: Any) -> None:
            self.close()
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, closing)


def _need(env: Mapping[str, str], key: str) -> str:
    value = env.get(key, "")
    if not value:
        raise LaunchError(f"{key} is not set: the launcher sets it for launcher.tracking")
    return value


class TensorBoard:
    """An event file of its own for each start, in the run's TensorBoard folder, written by
    tensorboardX's synchronous event writer (its SummaryWriter queues events for a thread, and
    a trainer killed right after a step would lose that step). A start after the first begins
    with TensorBoard's purge marker (SessionLog START at `purge_step`), as SummaryWriter's
    purge_step does: readers drop what an earlier start wrote from that step on."""

    def __init__(self, env: Mapping[str, str], purge_step: Optional[int], restart: int):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        logdir = _need(env, spec.ENV_TENSORBOARD_DIR)
        os.makedirs(logdir, exist_ok=True)
        self.writer = EventsWriter(
            os.path.join(logdir, "events"), f".{restart:04d}.{os.getpid()}.{time.time_ns()}"
        )
        if purge_step is not None:
            self.writer.write_event(
                Event(
                    wall_time=time.time(),
                    step=purge_step,
                    session_log=SessionLog(status=SessionLog.START),
                )
            )
        self.where = {"logdir": logdir}

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=key, simple_value=value) for key, value in metrics.items()]
        self.writer.write_event(
            Event(wall_time=time.time(), step=step, summary=Summary(value=values))
        )
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandB:
    """A W&B run by the launcher's id, resumed by every start (offline: one folder per start,
    all of one run id; `wandb sync` joins them)."""

    def __init__(self, env: Mapping[str, str], run_dir: Path):
        import wandb

        self.run = wandb.init(
            id=_need(env, "WANDB_RUN_ID"),
            resume="allow",
            project=env.get("WANDB_PROJECT") or None,
            entity=env.get("WANDB_ENTITY") or None,
            group=env.get("WANDB_RUN_GROUP") or None,
            name=env.get("WANDB_NAME") or None,
            dir=env.get("WANDB_DIR") or str(run_dir),
            settings=wandb.Settings(console="off", silent=True),
        )
        self.where = {
            "path": "/".join(p for p in (self.run.entity, self.run.project, self.run.id) if p),
            "mode": env.get("WANDB_MODE") or "online",
            "dir": env.get("WANDB_DIR") or str(run_dir),
        }

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step, commit=True)  # a row now, not at the next step

    def close(self) -> None:
        self.run.finish()


class MLflow:
    """An MLflow run found by the launcher's run tag (made on the first start), under its
    sweep's parent run when it is a sweep point."""

    def __init__(self, env: Mapping[str, str]):
        from mlflow.tracking import MlflowClient

        uri = _need(env, "MLFLOW_TRACKING_URI")
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self._experiment(env.get("MLFLOW_EXPERIMENT_NAME") or "Default")
        marker = _need(env, ENV_RUN_MARKER)
        run_id = self._find(experiment, spec.MLFLOW_RUN_TAG, marker)
        sweep = env.get(spec.ENV_SWEEP)
        self.parent = self._parent(uri, experiment, sweep) if sweep else None
        if run_id is None:
            tags = {spec.MLFLOW_RUN_TAG: marker}
            if self.parent:
                tags["mlflow.parentRunId"] = self.parent
            run_id = self.client.create_run(
                experiment, run_name=env.get(spec.ENV_RUN_NAME), tags=tags
            ).info.run_id
        else:
            self.client.update_run(run_id, "RUNNING")
        if self.parent:  # the sweep runs while any of its points does
            self.client.update_run(self.parent, "RUNNING")
        self.experiment, self.run_id = experiment, run_id
        self.where = {"tracking_uri": uri, "experiment_id": experiment, "run_id": run_id}

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except Exception:  # noqa: BLE001 - another run made it meanwhile
            again = self.client.get_experiment_by_name(name)
            if again is None:
                raise
            return str(again.experiment_id)

    def _find(self, experiment: str, tag: str, value: str) -> Optional[str]:
        runs = self.client.search_runs(
            [experiment],
            filter_string=f"tags.`{tag}` = '{value}'",
            max_results=1,
            order_by=["attributes.start_time ASC"],
        )
        return str(runs[0].info.run_id) if runs else None

    def _parent(self, uri: str, experiment: str, sweep: str) -> str:
        """The sweep's parent run: the first point to get here makes it (points that start
        at once, Slurm jobs, take a lock beside a SQLite store first)."""
        lock = None
        if uri.startswith("sqlite:///"):
            import fcntl

            lock = open(Path(uri[len("sqlite:///") :]).with_suffix(".lock"), "a")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = self._find(experiment, spec.MLFLOW_SWEEP_TAG, sweep)
            if found is not None:
                return found
            return str(
                self.client.create_run(
                    experiment, run_name=sweep, tags={spec.MLFLOW_SWEEP_TAG: sweep}
                ).info.run_id
            )
        finally:
            if lock is not None:
                lock.close()

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()]
        )

    def close(self) -> None:
        """This run ends; so does the sweep's parent when no other point of it is running (a
        later point sets it running again)."""
        self.client.set_terminated(self.run_id)
        if self.parent is None:
            return
        running = self.client.search_runs(
            [self.experiment],
            max_results=1,
            filter_string=f"tags.`mlflow.parentRunId` = '{self.parent}' and "
            "attributes.status = 'RUNNING'",
        )
        if not running:
            self.client.set_terminated(self.parent)
