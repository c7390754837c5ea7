"""The compose cache (launcher.config.compose_cache) gives what Hydra gives: the same composed
config, the same typed config and the same error for every command line, whether the cache is
off, misses or hits, and it is not used once a file it came from changed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.config import compose_cache
from launcher.config.compose import ConfigSource, cached, compose_config, open_config, run_spec
from launcher.spec.errors import ConfigError
from tests.areal_launch import run

CONF = Path(compose_cache.__file__).resolve().parents[1] / "conf"
CORPUS = [
    [],
    ["rollout.backend=sglang:d4t2", "actor.backend=fsdp:d8", "cluster=gpu8"],
    [
        "cluster=gpu8",
        "cluster.num_nodes=2",
        "ref=inherit",
        "critic=fsdp",
        "critic.backend=fsdp:d4",
        "rollout.backend=sglang:d4t2",
        "actor.backend=fsdp:d4",
    ],
    ["experiment=gpu1x8_collocated_sglang_fsdp"],
    ["experiment=gpu1x8_collocated_sglang_fsdp", "rollout=vllm", "rollout.backend=vllm:d2"],
    ["rollout.backend=vllm:d1", "rollout=vllm"],  # a choice after a value
    ["launcher=slurm", "launcher.partition=gpu", "cluster=gpu8"],
    ["launcher=ray", "cluster=gpu8"],
    ["actor.extra_args=[--a,--b]", "experiment_name=${trial_name}", "trial_name='t 1'"],
    ["model_path=x", "rollout.backend=vllm:d1", "ref=none"],
    ["scheduler.type=slurm"],  # AReaL's runner choice: Hydra's path whole
]
ERRORS = [
    ["rollout.nope=1"],
    ["actor.backend=fsdp:d8,fsdp:d4"],
    ["+x=1"],
    ["rollout=nope"],
    ["cluster.num_nodes=many"],
]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    where = tmp_path / "compose"
    monkeypatch.setenv(compose_cache.CACHE_ENV, str(where))
    yield where
    open_config(ConfigSource())


def composed(overrides, use_cache):
    """(the composed config as written, the typed config) for `overrides`."""
    if use_cache:
        with cached(ConfigSource()):
            cfg = compose_config(list(overrides), with_hydra=True)
    else:
        open_config(ConfigSource())
        cfg = compose_config(list(overrides), with_hydra=True)
    written = OmegaConf.to_container(cfg, resolve=False)
    return written, run_spec(cfg).config


def error_of(overrides, use_cache):
    with pytest.raises(ConfigError) as caught:
        composed(overrides, use_cache)
    return str(caught.value)


@pytest.mark.parametrize("overrides", CORPUS, ids=lambda o: " ".join(o) or "defaults")
def test_off_miss_and_hit_compose_the_same(cache_dir, overrides):
    whole = composed(overrides, use_cache=False)
    missed = composed(overrides, use_cache=True)
    hit = composed(overrides, use_cache=True)
    assert missed == whole
    assert hit == whole


def test_only_plain_command_lines_are_kept(cache_dir):
    for overrides in CORPUS:
        composed(overrides, use_cache=True)
    groups = compose_cache.config_groups(CONF)
    assert {"rollout", "actor", "critic", "experiment", "launcher", "cluster"} <= set(groups)
    kept = {tuple(compose_cache.split(o, groups) or ()) for o in CORPUS}
    assert len(list(cache_dir.glob("*.pickle"))) == len(kept)
    assert compose_cache.split(["+x=1"], ["rollout"]) is None
    assert compose_cache.split(["hydra.job.chdir=true"], ["rollout"]) is None
    assert compose_cache.split(["rollout@x=vllm"], ["rollout"]) is None
    assert compose_cache.split(["rollout=vllm", "rollout.backend=vllm:d1"], ["rollout"]) == [
        "rollout=vllm"
    ]


@pytest.mark.parametrize("overrides", ERRORS, ids=" ".join)
def test_errors_are_hydras_paths(cache_dir, overrides):
    whole = error_of(overrides, use_cache=False)
    assert error_of(overrides, use_cache=True) == whole
    assert error_of(overrides, use_cache=True) == whole


def test_a_value_after_a_hit_does_not_leak_into_the_next(cache_dir):
    first = composed(["actor.backend=fsdp:d2"], use_cache=True)[1]
    second = composed([], use_cache=True)[1]
    assert first.actor.backend == "fsdp:d2"
    assert second.actor.backend == composed([], use_cache=False)[1].actor.backend


def test_an_entry_is_dropped_when_a_file_it_came_from_changes(cache_dir, tmp_path):
    conf = tmp_path / "conf"
    (conf / "group").mkdir(parents=True)
    (conf / "config.yaml").write_text("a: 1\n")
    (conf / "group" / "x.yaml").write_text("b: 2\n")
    compose_cache.store(["group=x"], conf, {"kept": True})
    assert compose_cache.load(["group=x"], conf) == {"kept": True}
    assert compose_cache.load(["group=y"], conf) is None

    (conf / "group" / "x.yaml").write_text("b: 22\n")  # another size
    assert compose_cache.load(["group=x"], conf) is None

    compose_cache.store(["group=x"], conf, {"kept": True})
    (conf / "group" / "y.yaml").write_text("c: 3\n")  # a new option: the folder's mtime
    os.utime(conf / "group", ns=(1, 1))
    assert compose_cache.load(["group=x"], conf) is None


def test_off_keeps_nothing_and_a_broken_entry_is_a_miss(cache_dir, tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    conf.mkdir()
    compose_cache.store([], conf, {"kept": True})
    (entry,) = cache_dir.glob("*.pickle")
    entry.write_bytes(b"half-written")
    assert compose_cache.load([], conf) is None

    compose_cache.store(["y=1"], conf, {"kept": True})
    cache_dir.chmod(0o777)  # a folder others can write: its pickles are not run
    assert compose_cache.load(["y=1"], conf) is None
    cache_dir.chmod(0o700)
    assert compose_cache.load(["y=1"], conf) == {"kept": True}

    monkeypatch.setenv(compose_cache.CACHE_ENV, "off")
    assert compose_cache.folder() is None
    compose_cache.store(["x=1"], conf, {"kept": True})
    assert compose_cache.load(["x=1"], conf) is None
    assert len(list(cache_dir.glob("*.pickle"))) == 2


def test_plan_json_keeps_its_compose_and_prints_the_same(tmp_path):
    where = tmp_path / "compose"
    line = ["plan", "--json", "cluster=gpu8", "rollout.backend=sglang:d4", "actor.backend=fsdp:d4"]
    off = run(*line, env={compose_cache.CACHE_ENV: "off"})
    missed = run(*line, env={compose_cache.CACHE_ENV: str(where)})
    assert len(list(where.glob("*.pickle"))) == 1
    (entry,) = where.glob("*.pickle")
    stamp = entry.stat().st_mtime_ns
    hit = run(*line[:-1], "actor.backend=fsdp:d2", env={compose_cache.CACHE_ENV: str(where)})
    assert entry.stat().st_mtime_ns == stamp  # the same choices: read, not written again
    assert off.returncode == missed.returncode == hit.returncode == 0, off.stderr + hit.stderr
    assert json.loads(missed.stdout) == json.loads(off.stdout)
    assert json.loads(hit.stdout)["components"]["actor"]["gpus"] == [4, 5]  # the new value
    assert Path(str(where)).stat().st_mode & 0o077 == 0


def test_a_hit_records_the_folder_it_runs_in_now(cache_dir, tmp_path, monkeypatch):
    # as the installed command's sys.path is (`python -m pytest` puts "" first: the folder
    # one runs in, which is a key of the entry)
    monkeypatch.setattr(sys, "path", [os.path.abspath(p or ".") for p in sys.path])
    composed(["actor.backend=fsdp:d2"], use_cache=True)  # kept from the repository's root
    monkeypatch.chdir(tmp_path)
    line = ["actor.backend=fsdp:d1"]
    hit, whole = composed(line, use_cache=True)[0], composed(line, use_cache=False)[0]
    assert len(list(cache_dir.glob("*.pickle"))) == 1
    assert hit["hydra"]["runtime"]["cwd"] == str(tmp_path)
    assert hit == whole
