"""Pictures of a plan: the engine table, the terminal GPU map and the SVG map."""

import io
import re
import xml.etree.ElementTree as ET
from collections import Counter

from layouts import build
from rich.console import Console

from launcher.cli.render import MAX_ROWS, render_gpu_map, render_svg, render_table
from launcher.planning.ranks import component_plan
from launcher.spec.alloc import ModelAllocation as M
from launcher.spec.builtins import BUILTINS
from launcher.spec.cluster import ClusterSpec
from launcher.spec.plan import Plan

SVG = "{http://www.w3.org/2000/svg}"


def text_of(renderable, width=200) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def hybrid_two_by_eight() -> Plan:
    return build(
        {
            "rollout": M("sglang", dp=4, tp=2),
            "actor": M("megatron", dp=8, tp=2),
            "ref": M("fsdp", dp=8),
        },
        ClusterSpec(2, 8),
        {"actor": "all", "rollout": "8-15", "ref": "0-7"},
    )


def test_table_lists_engine_backend_spec_world_inheritance_and_gpus():
    plan = build({"rollout": M("vllm", dp=4), "actor": M("fsdp", dp=4)}, ClusterSpec(1, 8))
    plan.components["ref"] = component_plan(
        "ref", M("fsdp", dp=4), (4, 5, 6, 7), plan.cluster, inherited_from="actor"
    )
    rows = [
        line.split("│")[1:-1]
        for line in text_of(render_table(plan)).splitlines()
        if line.count("│") > 2
    ]
    cells = [[c.strip() for c in row] for row in rows]
    assert cells[0] == ["rollout", "vllm", "vllm:d4", "4", "", "0-3", "4 x 1 GPU"]
    assert cells[2] == ["ref", "fsdp", "fsdp:d4", "4", "actor", "4-7", "dp4"]


def test_map_has_a_row_per_node_and_a_column_per_gpu():
    out = text_of(render_gpu_map(hybrid_two_by_eight()))
    assert "gpu0" in out and "gpu7" in out and "gpu8" not in out
    assert re.search(r"^node 0 ", out, re.M) and re.search(r"^node 1 ", out, re.M)


def test_map_marks_shared_gpus_with_both_letters():
    out = text_of(render_gpu_map(hybrid_two_by_eight()))
    node0 = next(line for line in out.splitlines() if line.startswith("node 0"))
    node1 = next(line for line in out.splitlines() if line.startswith("node 1"))
    assert node0.split()[2:] == ["A+F"] * 8
    assert node1.split()[2:] == ["R+A"] * 8


def test_map_brackets_instances_and_tp_groups_and_numbers_them():
    lines = text_of(render_gpu_map(hybrid_two_by_eight())).splitlines()
    rollout = next(line for line in lines if line.strip().startswith("rollout "))
    actor = [line for line in lines if line.strip().startswith("actor ")]
    assert re.findall(r"\[R(\d+)\s+R\1\]", rollout) == ["0", "1", "2", "3"]
    assert re.findall(r"\[A(\d+)\s+A(\d+)\]", actor[1])[0] == ("8", "9")
    assert "[" not in next(line for line in lines if line.strip().startswith("ref "))  # tp 1


def test_map_has_a_legend_with_letters_and_specs():
    out = text_of(render_gpu_map(hybrid_two_by_eight()))
    assert "R rollout sglang:d4t2 (4 instances x 2 GPUs)" in out
    assert "A actor megatron:d8t2 (16 ranks, tp 2)" in out
    assert "F ref fsdp:d8 (8 ranks)" in out


def test_big_cluster_collapses_identical_nodes_and_caps_rows():
    plan = build(
        {"rollout": M("sglang", dp=2048, tp=2), "actor": M("fsdp", dp=4096)}, ClusterSpec(1024, 8)
    )
    out = text_of(render_gpu_map(plan))
    assert re.search(r"^nodes 0-511 +R", out, re.M) and re.search(r"^nodes 512-1023 +A", out, re.M)
    assert len(out.splitlines()) < 20


def test_many_distinct_nodes_show_the_first_and_last_and_count_the_rest():
    even = ",".join(f"{4 * k}-{4 * k + 1}" for k in range(20))  # rollout on nodes 0, 2, 4...
    odd = ",".join(f"{4 * k + 2}-{4 * k + 3}" for k in range(20))  # actor on nodes 1, 3, 5...
    plan = build(
        {"rollout": M("vllm", dp=40), "actor": M("fsdp", dp=40)},
        ClusterSpec(40, 2),
        {"rollout": even, "actor": odd},
    )
    rows = [
        line.strip()
        for line in text_of(render_gpu_map(plan)).splitlines()
        if line.startswith(("node", "..."))
    ]
    assert len(rows) == MAX_ROWS
    assert rows[0].startswith("node 0 ") and rows[-1].startswith("node 39 ")
    assert "... 9 more nodes ..." in rows


def test_wide_nodes_wrap_onto_rows_of_sixteen():
    plan = build({"rollout": M("vllm", dp=8), "actor": M("fsdp", dp=16)}, ClusterSpec(1, 24, "cpu"))
    out = text_of(render_gpu_map(plan))
    assert "node 0 gpu 0-15" in out and "node 0 gpu 16-23" in out
    assert "virtual GPU slots (cpu)" in out


def test_svg_is_standalone_and_well_formed():
    svg = render_svg(hybrid_two_by_eight())
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and "href" not in svg and "<script" not in svg


def test_svg_draws_one_coloured_cell_per_engine_on_each_gpu():
    root = ET.fromstring(render_svg(hybrid_two_by_eight()))
    fills = Counter(r.get("fill") for r in root.iter(f"{SVG}rect"))
    assert fills[BUILTINS["rollout"].color] - 1 == 8  # one more: the legend swatch
    assert fills[BUILTINS["actor"].color] - 1 == 16
    assert fills[BUILTINS["ref"].color] - 1 == 8


def test_svg_outlines_each_instance_and_tp_group():
    root = ET.fromstring(render_svg(hybrid_two_by_eight()))
    outlines = [r for r in root.iter(f"{SVG}rect") if r.get("fill") == "none"]
    assert len(outlines) == 4 + 8  # 4 rollout instances, 8 actor tp groups, ref has tp 1


def test_svg_labels_cells_and_marks_shared_gpus():
    svg = render_svg(hybrid_two_by_eight())
    texts = ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert texts.count("R3") == 2 and "A15" in texts and "F7" in texts
    assert texts.count("A+F") == 8 and texts.count("R+A") == 8


def test_svg_of_a_thousand_nodes_stays_small():
    plan = build(
        {"rollout": M("sglang", dp=2048, tp=2), "actor": M("fsdp", dp=4096)}, ClusterSpec(1024, 8)
    )
    assert len(render_svg(plan)) < 30_000


def test_map_says_how_each_rollout_shard_gets_its_weights():
    collocated = text_of(render_gpu_map(hybrid_two_by_eight()))
    assert (
        "weight sync actor -> rollout: 8 shards fed (8 same GPU); at most 1 per actor rank"
        in collocated
    )
    apart = build(
        {"rollout": M("sglang", dp=5, tp=2), "actor": M("fsdp", dp=4)},
        ClusterSpec(2, 8),
        {"rollout": "0-9", "actor": "12-15"},
    )
    assert "10 shards fed (2 same node, 8 across nodes); at most 3 per actor rank" in text_of(
        render_gpu_map(apart)
    )


def test_the_moe_table_shows_the_expert_layout_beside_the_attention_one():
    from launcher.spec.alloc import parse_backend

    hybrid = parse_backend("megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)")
    plan = Plan(
        ClusterSpec(4, 8),
        "disaggregated",
        {"actor": component_plan("actor", hybrid, range(32), ClusterSpec(4, 8))},
    )
    text = " ".join(text_of(render_table(plan)).replace("│", " ").split())
    assert "attn dp4 tp2 pp2 cp2 | experts ep2 etp4 edp2" in text
    plain = Plan(
        ClusterSpec(4, 8),
        "disaggregated",
        {
            "actor": component_plan(
                "actor", parse_backend("megatron:d8p2t2e4"), range(32), ClusterSpec(4, 8)
            )
        },
    )
    assert "dp8 tp2 pp2 | experts ep4 etp1 edp4" in " ".join(
        text_of(render_table(plain)).replace("│", " ").split()
    )
