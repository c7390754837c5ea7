"""What a run left in each experiment tracker, read back with the tracker's own library:
TensorBoard's event reader, MLflow's client on the run's SQLite store, and W&B's own record
format (its protobuf `Record`s; wandb 0.31 ships no Python reader of its offline `.wandb` files,
so the LevelDB-style log framing around them is read here, as wandb's writer frames it)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 32 * 1024  # the log's block size; every record has a 7-byte header (crc, length, type)
FILE_HEADER = 7  # ":W&B", a 2-byte magic, a version byte
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def tensorboard_steps(logdir: Path, tag: str = "reward") -> list[int]:
    """The steps TensorBoard's own reader shows for `tag` (every event file of the folder)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def _records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    out, pos, part = [], FILE_HEADER, b""
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += room
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            part = chunk
        elif kind == MIDDLE:
            part += chunk
        elif kind == LAST:
            out.append(part + chunk)
    return out


@dataclass
class WandbStart:
    """One offline start of a W&B run: what its `.wandb` file says."""

    run_id: str = ""
    project: str = ""
    group: str = ""
    name: str = ""
    steps: list[int] = field(default_factory=list)


def wandb_offline(wandb_dir: Path) -> list[WandbStart]:
    """Every offline start under `<WANDB_DIR>/wandb`, oldest first."""
    from wandb.proto import wandb_internal_pb2 as pb

    starts = []
    for path in sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb")):
        start = WandbStart()
        for data in _records(path):
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                start.run_id, start.project = record.run.run_id, record.run.project
                start.group, start.name = record.run.run_group, record.run.display_name
            elif kind == "history":
                for item in record.history.item:
                    if item.key == "_step" or list(item.nested_key) == ["_step"]:
                        start.steps.append(int(item.value_json))
        starts.append(start)
    return starts


def mlflow_client(run_dir: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{run_dir.parent / 'mlflow.db'}")


def mlflow_runs(run_dir: Path, experiment: str = "areal") -> list:
    client = mlflow_client(run_dir)
    found = client.get_experiment_by_name(experiment)
    return list(client.search_runs([found.experiment_id])) if found else []


def mlflow_steps(run_dir: Path, run_id: str, key: str = "reward") -> list[int]:
    return [m.step for m in mlflow_client(run_dir).get_metric_history(run_id, key)]
