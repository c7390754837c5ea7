"""The deprecated allocation_mode string (launcher/planning/legacy.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.config.peers.areal_allocation import LegacyComponent, parse_allocation_mode
from launcher.spec.alloc import AllocationError, parse_backend


def parts(text: str) -> list[tuple[str, str, int]]:
    return [(c.name, str(c.alloc), c.group) for c in parse_allocation_mode(text)]


def error_of(text: str) -> str:
    with pytest.raises(AllocationError) as info:
        parse_allocation_mode(text)
    return str(info.value)


def test_unnamed_inference_part_is_rollout_and_training_part_is_actor():
    assert parts("sglang:d4t2+fsdp:d8") == [("rollout", "sglang:d4t2", 0), ("actor", "fsdp:d8", 1)]
    assert parts("fsdp:d8+vllm:t2") == [("actor", "fsdp:d8", 0), ("rollout", "vllm:t2", 1)]


def test_single_unnamed_part_is_named_by_its_kind():
    assert parts("fsdp:d8") == [("actor", "fsdp:d8", 0)]
    assert parts("sglang:d4") == [("rollout", "sglang:d4", 0)]


def test_parts_hold_parsed_allocations():
    first = parse_allocation_mode("sglang:d4t2+fsdp:d8")[0]
    assert first == LegacyComponent("rollout", parse_backend("sglang:d4t2"), 0)


def test_bar_colocates_with_the_part_before_it_and_binds_tighter_than_plus():
    assert parts("sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4") == [
        ("rollout", "sglang:d2", 0),
        ("actor", "fsdp:d4", 1),
        ("critic", "fsdp:d4", 1),
    ]
    assert parts("fsdp[actor]:d4|fsdp[ref]:d4+sglang[rollout]:d2+fsdp[critic]:t2") == [
        ("actor", "fsdp:d4", 0),
        ("ref", "fsdp:d4", 0),
        ("rollout", "sglang:d2", 1),
        ("critic", "fsdp:t2", 2),
    ]


def test_unnamed_colocated_pair_shares_one_group():
    assert parts("sglang:d4|fsdp:d4") == [("rollout", "sglang:d4", 0), ("actor", "fsdp:d4", 0)]


def test_hybrid_moe_part_keeps_its_bar_inside():
    assert parts("megatron[actor]:attn:d4|ffn:e2|fsdp[critic]:d4+sglang[rollout]:d4") == [
        ("actor", "megatron:(attn:d4|ffn:d2e2)", 0),
        ("critic", "fsdp:d4", 0),
        ("rollout", "sglang:d4", 1),
    ]


def test_three_or_more_parts_must_all_be_named():
    assert error_of("sglang:d2+fsdp:d4+fsdp[critic]:d4") == (
        "sglang:d2+fsdp:d4+fsdp[critic]:d4: column 0: with 3 parts every part needs a name "
        "(e.g. sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4)"
    )


def test_colocated_parts_need_equal_world_sizes():
    assert error_of("sglang:d2+fsdp[actor]:d4|fsdp[critic]:d2") == (
        "sglang:d2+fsdp[actor]:d4|fsdp[critic]:d2: column 25: fsdp:d2 shares the GPUs of "
        "fsdp:d4 ('|') but needs 2 GPUs, not 4 "
        "(colocated parts need equal world sizes; use '+' for separate GPUs)"
    )


def test_names_name_engines_not_workers():
    assert error_of("sglang[reward]:d2+fsdp[a]:d4") == (
        "sglang[reward]:d2+fsdp[a]:d4: column 0: 'reward' cannot name an engine (lowercase "
        "letters, digits and _, starting with a letter, not a worker's name (env, reward, "
        "agent))"
    )


def test_name_must_fit_the_backend_kind():
    assert error_of("sglang[actor]:d4") == (
        "sglang[actor]:d4: column 0: actor needs a training backend (fsdp, megatron, archon), "
        "not sglang (rollout serves; actor, critic, ref and teacher train)"
    )
    assert "rollout needs an inference backend" in error_of("fsdp[rollout]:d4")


def test_a_name_appears_once():
    assert error_of("fsdp[actor]:d4+fsdp[actor]:d4") == (
        "fsdp[actor]:d4+fsdp[actor]:d4: column 15: actor given twice, first at column 0 "
        "(each engine appears once)"
    )
    assert "actor given twice" in error_of("fsdp:d4+fsdp[actor]:d4")


def test_second_unnamed_part_of_a_kind_needs_a_name():
    assert error_of("fsdp:d4+fsdp:t2") == (
        "fsdp:d4+fsdp:t2: column 8: a second training part needs a name (e.g. fsdp[critic]:t2)"
    )


def test_part_errors_carry_the_column_in_the_whole_string():
    assert error_of("sglang:d4+fsdp:d4p2").startswith(
        "sglang:d4+fsdp:d4p2: column 17: fsdp does not take 'p'"
    )


def test_empty_and_dangling_joins_are_errors():
    assert error_of("") == (
        "'': empty allocation_mode (e.g. sglang:d4t2+fsdp:d8 or "
        "sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4)"
    )
    assert "expected a part after '+'" in error_of("sglang:d4+")
    assert "unclosed '['" in error_of("fsdp[actor:d4")


def test_uppercase_is_rejected():
    assert "use lowercase: sglang:d4+fsdp:d4" in error_of("SGLang:d4+fsdp:d4")


CHARS = "dtpce:()|+[]0123456789 " + "sglangvllmfsdpmegatronarchonattnffn" + "rolutactoricef"


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=CHARS, max_size=60)))
def test_random_text_raises_nothing_but_a_one_line_allocation_error(text):
    try:
        result = parse_allocation_mode(text)
    except AllocationError as e:
        assert "\n" not in str(e)
    else:
        assert len({c.name for c in result}) == len(result)
