"""The JSON of the plan and the request (launcher/spec/codec.py): schema 1's keys and shapes, and
every record read back equal to what was written."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Optional

from launcher.spec.cluster import ClusterSpec, NodeGroup
from launcher.spec.codec import JsonRecord, from_json, json_key, to_json
from launcher.spec.plan import Plan, Runs, SyncPair, WeightSync
from launcher.spec.process import ProcessSpec
from launcher.spec.request import EngineAsk, FlagCheck, Folders, LaunchRequest
from tests.plans import plan_dict

SERVER = ProcessSpec(
    name="rollout-0",
    component="rollout",
    role="server",
    node=1,
    argv=("python", "-m", "vllm"),
    env={"HF_TOKEN": "secret", "A": "1"},
    gpus=(0, 1),
    ports=(8000,),
    health_url="http://@@AREAL_NODE_1@@:8000/health",
)


def request(**changes) -> LaunchRequest:
    given = dict(
        run_id="r",
        run_dir="/runs/r",
        job_name="job",
        device="cuda",
        num_nodes=3,
        gpus_per_node=8,
        processes=(SERVER,),
    )
    return LaunchRequest(**{**given, **changes})


def test_a_bare_request_writes_schema_1s_keys_in_order_and_no_optional_part():
    written = request().to_dict()
    assert list(written) == [
        "schema",
        "run_id",
        "run_dir",
        "job_name",
        "device",
        "num_nodes",
        "gpus_per_node",
        "grace_period_s",
        "health_timeout_s",
        "paths",
        "max_restarts",
        "hang_timeout_s",
        "console",
        "processes",
    ]
    assert written["processes"][0] == {
        "name": "rollout-0",
        "component": "rollout",
        "role": "server",
        "node": 1,
        "argv": ["python", "-m", "vllm"],
        "env": {"HF_TOKEN": "secret", "A": "1"},
        "gpus": [0, 1],
        "ports": [8000],
        "health_url": "http://@@AREAL_NODE_1@@:8000/health",
    }


def test_a_full_request_writes_its_optional_parts_and_reads_back_equal():
    full = request(
        node_groups=(NodeGroup("cpu", (2,), gpus=False, env={"X": "1"}),),
        cpu_nodes=1,
        folders=Folders(("/f", "/f/nr"), ("/f/nr/{user}/exp/trial",)),
        flag_check=FlagCheck("vllm", "rollout", {"--max-num-seqs": "rollout.vllm.max_num_seqs"}),
        asks={"actor": EngineAsk(cpu=4, mem_gib=16, image="img.sqsh")},
        hang_timeout_s=30.0,
    )
    written = full.to_dict()
    assert list(written)[13:] == [
        "node_groups",
        "cpu_nodes",
        "folders",
        "flag_check",
        "asks",
        "processes",
    ]
    assert written["node_groups"] == [
        {
            "label": "cpu",
            "nodes": [2],
            "gpus": False,
            "env": {"X": "1"},
            "python": None,
            "hardware": None,
        }
    ]
    assert written["flag_check"]["origins"] == {"--max-num-seqs": "rollout.vllm.max_num_seqs"}
    assert written["asks"] == {
        "actor": {
            "cpu": 4,
            "mem_gib": 16,
            "image": "img.sqsh",
            "nodelist": None,
            "exclude": None,
            "key": "",
            "reservation": None,
            "exclusive": None,
        }
    }
    assert written["folders"] == {"make": ["/f", "/f/nr"], "clear": ["/f/nr/{user}/exp/trial"]}
    assert LaunchRequest.from_dict(json.loads(full.to_json())) == full


def test_secrets_are_masked_only_when_asked_and_the_record_keeps_them():
    assert request().to_dict(mask_secrets=True)["processes"][0]["env"] == {
        "HF_TOKEN": "***",
        "A": "1",
    }
    assert request().to_dict()["processes"][0]["env"]["HF_TOKEN"] == "secret"
    assert SERVER.env["HF_TOKEN"] == "secret"


def test_weight_sync_writes_from_and_to():
    sync = WeightSync("actor", "rollout", (SyncPair(0, 0, 0), SyncPair(1, 0, 1)))
    assert sync.to_dict() == {
        "from": "actor",
        "to": "rollout",
        "pairs": [{"rank": 0, "instance": 0, "tp": 0}, {"rank": 1, "instance": 0, "tp": 1}],
    }
    assert WeightSync.from_dict(sync.to_dict()) == sync


def test_a_cluster_writes_its_node_groups_only_when_it_has_some():
    assert ClusterSpec(2, 8).to_dict() == {"num_nodes": 2, "gpus_per_node": 8, "device": "cuda"}
    grouped = ClusterSpec(3, 8, "cuda", cpu_nodes=1, groups=(NodeGroup("cpu", (2,), gpus=False),))
    assert list(grouped.to_dict()) == [
        "num_nodes",
        "gpus_per_node",
        "device",
        "cpu_nodes",
        "node_groups",
    ]
    assert ClusterSpec.from_dict(grouped.to_dict()) == grouped


def test_a_workers_runs_are_a_list_of_runs():
    runs = Runs([(0, 100, (), 2), (100, 100, (3,), 1)])
    assert runs.to_list() == [
        {"first": 0, "count": 100, "gpus": [], "node": 2},
        {"first": 100, "count": 100, "gpus": [3], "node": 1},
    ]
    assert Runs.from_list(runs.to_list()).runs == runs.runs


def test_plans_read_back_equal_to_what_was_written():
    for dotted in (
        {"cluster.device": "cpu"},
        {"cluster.device": "cpu", "components": {"sim": {"entry": "sim.py", "processes": 3}}},
        {"actor.backend": "megatron:(attn:d2t2|ffn:t2e2)", "ref.backend": "fsdp:d4"},
    ):
        written = plan_dict(**dotted)
        again = Plan.from_dict(json.loads(json.dumps(written))).to_dict()
        assert again == written


@dataclass(frozen=True)
class Inner(JsonRecord):
    size: int
    name: Optional[str] = None


@dataclass(frozen=True)
class Outer(JsonRecord):
    first: str = field(metadata=json_key("1st"))
    inners: tuple[Inner, ...] = ()
    by_name: Mapping[str, Inner] = field(default_factory=dict)
    maybe: Optional[Inner] = None
    later: int = 0
    JSON_OPTIONAL: ClassVar = (("maybe", "later"),)


def test_the_codec_follows_the_types_keys_and_optional_groups_the_class_declares():
    bare = Outer("a")
    assert to_json(bare) == {"1st": "a", "inners": [], "by_name": {}}
    full = Outer("a", (Inner(1),), {"x": Inner(2, "two")}, later=3)
    assert to_json(full) == {
        "1st": "a",
        "inners": [{"size": 1, "name": None}],
        "by_name": {"x": {"size": 2, "name": "two"}},
        "maybe": None,
        "later": 3,
    }
    assert from_json(Outer, json.loads(json.dumps(to_json(full)))) == full
    assert from_json(Outer, {"1st": "b"}) == Outer("b")
