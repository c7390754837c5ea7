"""launcher.trainer.runtime: what a started worker learns from the plan and its environment."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest

from launcher.spec.errors import LaunchError
from launcher.trainer.runtime import load_plan, plan_from_dict, wait_for_servers


def _rank(rank, gpu, node, dp, tp, pp, cp=0, gpus_per_node=4):
    return {
        "rank": rank,
        "gpu": gpu,
        "node": node,
        "local_gpu": gpu % gpus_per_node,
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
    }


# actor megatron:d2p2t2 on gpus 0-7 (tp fastest, then cp, dp, pp), rollout vllm:d2t2 on 8-11
PLAN = {
    "schema": 1,
    "cluster": {"num_nodes": 3, "gpus_per_node": 4, "device": "cuda"},
    "mode": "disaggregated",
    "components": {
        "rollout": {
            "backend": "vllm",
            "spec": "vllm:d2t2",
            "world_size": 4,
            "gpus": [8, 9, 10, 11],
            "instances": [
                {"index": 0, "gpus": [8, 9], "nodes": [2]},
                {"index": 1, "gpus": [10, 11], "nodes": [2]},
            ],
        },
        "actor": {
            "backend": "megatron",
            "spec": "megatron:d2p2t2",
            "world_size": 8,
            "gpus": list(range(8)),
            "ranks": [
                _rank(0, 0, 0, dp=0, tp=0, pp=0),
                _rank(1, 1, 0, dp=0, tp=1, pp=0),
                _rank(2, 2, 0, dp=1, tp=0, pp=0),
                _rank(3, 3, 0, dp=1, tp=1, pp=0),
                _rank(4, 4, 1, dp=0, tp=0, pp=1),
                _rank(5, 5, 1, dp=0, tp=1, pp=1),
                _rank(6, 6, 1, dp=1, tp=0, pp=1),
                _rank(7, 7, 1, dp=1, tp=1, pp=1),
            ],
        },
        "ref": {
            "backend": "megatron",
            "spec": "megatron:d2p2t2",
            "inherited_from": "actor",
            "world_size": 8,
            "gpus": list(range(8)),
            "ranks": [],
        },
    },
    "weight_sync": [
        {
            "from": "actor",
            "to": "rollout",
            "pairs": [
                {"rank": 0, "instance": 0, "tp": 0},
                {"rank": 1, "instance": 0, "tp": 1},
                {"rank": 2, "instance": 1, "tp": 0},
                {"rank": 3, "instance": 1, "tp": 1},
            ],
        }
    ],
    "processes": [
        {
            "name": "rollout-0",
            "component": "rollout",
            "role": "server",
            "node": 2,
            "argv": [],
            "env": {},
            "gpus": [0, 1],
            "ports": [31000],
            "health_url": "http://@@AREAL_NODE_2@@:31000/health",
        },
        {
            "name": "rollout-1",
            "component": "rollout",
            "role": "server",
            "node": 2,
            "argv": [],
            "env": {},
            "gpus": [2, 3],
            "ports": [31001],
            "health_url": "http://@@AREAL_NODE_2@@:31001/health",
        },
        {
            "name": "actor",
            "component": "actor,ref",
            "role": "trainer",
            "node": 0,
            "argv": [],
            "env": {},
            "gpus": [0, 1, 2, 3],
            "ports": [],
            "health_url": None,
        },
    ],
    "recipe": {"steps": 7},
    "model_path": "~/models/tiny",
}


def rt(env=None, plan=PLAN):
    return plan_from_dict(plan, env=env or {})


def test_components_come_from_areal_component_comma_list():
    assert rt({"AREAL_COMPONENT": "actor, ref"}).components() == ["actor", "ref"]


def test_components_default_to_the_plans_training_engines():
    assert rt().components() == ["actor", "ref"]


def test_rank_comes_from_torchrun_env_unless_given():
    plan = rt({"RANK": "5"})
    assert plan.rank() == 5
    assert plan.coords()["rank"] == 5
    assert plan.coords(2)["rank"] == 2


def test_coords_are_the_plans_placement_of_the_rank():
    assert rt().coords(6) == {
        "rank": 6,
        "dp": 1,
        "tp": 0,
        "pp": 1,
        "cp": 0,
        "gpu": 6,
        "node": 1,
        "local_gpu": 2,
    }


def test_groups_hold_ranks_differing_only_on_that_axis():
    plan = rt()
    assert plan.group("tp", 2) == [2, 3]
    assert plan.group("dp", 5) == [5, 7]
    assert plan.group("pp", 3) == [3, 7]
    assert plan.group("cp", 4) == [4]


def test_groups_follow_the_plans_rank_list_not_a_formula():
    plan = json.loads(json.dumps(PLAN))
    ranks = plan["components"]["actor"]["ranks"]
    for entry in ranks:  # a plan that put tp slowest instead: groups must follow it
        entry["tp"], entry["pp"] = entry["pp"], entry["tp"]
    assert rt(plan=plan).group("tp", 0) == [0, 4]
    assert rt(plan=plan).group("pp", 0) == [0, 1]


def test_axis_sizes_are_read_from_coordinates():
    plan = rt()
    assert [plan.size(a) for a in ("dp", "tp", "pp", "cp")] == [2, 2, 2, 1]
    assert plan.world_size() == 8


def test_weight_targets_are_the_ranks_sync_pairs():
    plan = rt({"RANK": "3"})
    assert plan.weight_targets() == [(1, 1)]
    assert plan.weight_targets(0) == [(0, 0)]
    assert plan.weight_targets(6) == []


def test_server_addrs_come_from_env_first():
    env = {"AREAL_LLM_SERVER_ADDRS": "h1:1,h2:2"}
    assert rt(env).server_addrs() == ["h1:1", "h2:2"]


def test_server_addrs_fall_back_to_the_plans_servers_with_the_nodes_addresses():
    """Runs with so many servers that the variable would not fit name none: the plan does."""
    assert rt({"AREAL_HOSTS": "n0,n1,n2"}).server_addrs() == ["n2:31000", "n2:31001"]
    assert rt().server_addrs() == ["127.0.0.1:31000", "127.0.0.1:31001"]  # all on this machine


def test_recipe_options_lay_the_plan_over_defaults():
    assert rt().recipe_options({"steps": 3, "lr": 0.1}) == {"steps": 7, "lr": 0.1}


def test_model_path_is_expanded():
    assert not rt().model_path().startswith("~")


def test_unknown_engine_or_axis_is_a_launch_error():
    with pytest.raises(LaunchError, match="critic"):
        rt().coords(0, engine="critic")
    with pytest.raises(LaunchError, match="ep"):
        rt().group("ep", 0)
    with pytest.raises(LaunchError, match="rank 9"):
        rt().coords(9)


def test_load_plan_reads_the_path_in_areal_launch_plan(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN))
    plan = load_plan(env={"AREAL_LAUNCH_PLAN": str(path), "AREAL_COMPONENT": "actor"})
    assert plan.components() == ["actor"] and plan.path == str(path)


def test_load_plan_without_a_plan_says_what_to_set(tmp_path):
    with pytest.raises(LaunchError, match="AREAL_LAUNCH_PLAN"):
        load_plan(env={})
    with pytest.raises(LaunchError, match="no such file"):
        load_plan(str(tmp_path / "missing.json"), env={})


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_wait_for_servers_returns_once_all_answer_health():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        addr = f"127.0.0.1:{server.server_address[1]}"
        assert wait_for_servers([addr], timeout_s=10) == [addr]
    finally:
        server.shutdown()


def test_wait_for_servers_times_out_naming_the_late_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    port = server.server_address[1]
    server.server_close()  # nothing listens there now
    with pytest.raises(TimeoutError, match=f"127.0.0.1:{port}"):
        wait_for_servers([f"127.0.0.1:{port}"], timeout_s=0.3, interval_s=0.1)


def test_runtime_imports_without_torch():
    code = "import sys, launcher.trainer.runtime; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_run_dir_is_areal_run_dir_else_the_plans_folder(tmp_path):
    assert rt({"AREAL_RUN_DIR": "/runs/a"}).run_dir() == "/runs/a"
    assert plan_from_dict(PLAN, env={}, path=str(tmp_path / "plan.json")).run_dir() == str(tmp_path)
    assert rt().run_dir() is None


def test_served_model_name_comes_from_env_with_the_launchers_default():
    assert rt({"AREAL_SERVED_MODEL_NAME": "m"}).served_model_name() == "m"
    assert rt().served_model_name() == "policy"
