"""The GPU-set language of cluster.component_placement: parse and print."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.spec.cluster import ClusterSpec
from launcher.spec.errors import LaunchError, PlacementError
from launcher.spec.gpuset import format_gpu_set, parse_gpu_set

TWO_BY_EIGHT = ClusterSpec(2, 8)


def test_all_means_every_gpu_of_the_cluster():
    assert parse_gpu_set("all", TWO_BY_EIGHT) == tuple(range(16))


def test_ranges_single_gpus_and_lists_parse_in_order():
    assert parse_gpu_set("0-2,5,7", TWO_BY_EIGHT) == (0, 1, 2, 5, 7)
    assert parse_gpu_set("3", TWO_BY_EIGHT) == (3,)
    assert parse_gpu_set(" 8 - 9 , 12 ", TWO_BY_EIGHT) == (8, 9, 12)


def test_int_from_hydra_is_a_one_gpu_set():
    assert parse_gpu_set(3, TWO_BY_EIGHT) == (3,)


def test_descending_range_is_an_error_that_shows_the_ascending_form():
    with pytest.raises(PlacementError, match=r"'15-8'.*descends \(write 8-15\)"):
        parse_gpu_set("15-8", TWO_BY_EIGHT)


def test_gpu_listed_twice_is_an_error():
    with pytest.raises(PlacementError, match="GPU 2 is listed twice"):
        parse_gpu_set("0-2,2", TWO_BY_EIGHT)


def test_list_out_of_order_is_an_error():
    with pytest.raises(PlacementError, match="ascending order"):
        parse_gpu_set("5,3", TWO_BY_EIGHT)


def test_gpu_outside_the_cluster_error_names_the_cluster_and_a_fix():
    with pytest.raises(PlacementError) as err:
        parse_gpu_set("8-16", TWO_BY_EIGHT)
    assert "GPU 16 is outside the cluster, which has GPUs 0-15 (2 nodes x 8)" in str(err.value)
    assert "cluster.num_nodes" in str(err.value)


@pytest.mark.parametrize(
    "text", ["x", "", "  ", "1-", "-1", "1-2-3", "1.5", "\u00b2", "0,,2", True, 2.0, None, [0, 1]]
)
def test_garbage_is_a_one_line_error(text):
    with pytest.raises(PlacementError) as err:
        parse_gpu_set(text, TWO_BY_EIGHT)
    assert "\n" not in str(err.value)
    assert isinstance(err.value, LaunchError)


def test_error_names_the_placement_key_the_user_wrote():
    with pytest.raises(PlacementError, match=r"^cluster\.component_placement\.actor,rollout='x'"):
        parse_gpu_set("x", TWO_BY_EIGHT, key="actor,rollout")


def test_format_writes_runs_as_ranges():
    assert format_gpu_set([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert format_gpu_set([]) == ""


@given(st.sets(st.integers(0, 63), min_size=1))
def test_format_then_parse_gives_the_same_set(gpus):
    ordered = tuple(sorted(gpus))
    assert parse_gpu_set(format_gpu_set(ordered), ClusterSpec(8, 8)) == ordered
