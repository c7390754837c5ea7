"""Backend strings (launcher/spec/alloc.py): one test per rule of docs/architecture.md §3."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.spec import registry
from launcher.spec.alloc import AllocationError, ModelAllocation, parse_backend

BACKEND_DIMS = {name: registry.backend_dims(name) for name in registry.backend_names()}


def error_of(spec: str) -> str:
    with pytest.raises(AllocationError) as info:
        parse_backend(spec)
    return str(info.value)


# ------------------------------------------------------------------------------- plain form
def test_plain_dims_give_sizes_and_world_size():
    a = parse_backend("sglang:d4t2")
    assert (a.backend, a.dp, a.tp, a.pp, a.cp, a.ep, a.etp) == ("sglang", 4, 2, 1, 1, 1, 1)
    assert a.world_size == 8


def test_dims_in_any_order_give_the_same_allocation():
    assert parse_backend("megatron:t2p2d4c2") == parse_backend("megatron:d4p2t2c2")


@pytest.mark.parametrize("backend,dims", sorted(BACKEND_DIMS.items()))
def test_each_backend_takes_its_dims(backend, dims):
    a = parse_backend(f"{backend}:" + "".join(f"{d}2" for d in dims))
    assert a.world_size == 2 ** len(dims.replace("e", ""))


@pytest.mark.parametrize(
    "spec,hint",
    [
        (
            "fsdp:d4p2",
            "fsdp:d4p2: column 7: fsdp does not take 'p' "
            "(fsdp takes d, t, c; use megatron for pipeline parallel)",
        ),
        (
            "fsdp:d4e2",
            "fsdp:d4e2: column 7: fsdp does not take 'e' "
            "(fsdp takes d, t, c; use megatron for expert parallel)",
        ),
        (
            "sglang:d2c2",
            "sglang:d2c2: column 9: sglang does not take 'c' (sglang takes d, t, p; "
            "context parallel is for training backends: fsdp, megatron, archon)",
        ),
        (
            "vllm:e2",
            "vllm:e2: column 5: vllm does not take 'e' (vllm takes d, t, p; "
            "expert parallel is for training backends: megatron, archon)",
        ),
    ],
)
def test_dim_the_backend_does_not_take_is_an_error_above_size_one(spec, hint):
    assert error_of(spec) == hint


@pytest.mark.parametrize(
    "spec,canonical",
    [
        ("fsdp:d4p1t1", "fsdp:d4"),
        ("sglang:d4p1t1", "sglang:d4"),
        ("fsdp:e1d2", "fsdp:d2"),
        ("vllm:c1t2", "vllm:t2"),
    ],
)
def test_dim_the_backend_does_not_take_is_accepted_with_size_one(spec, canonical):
    assert str(parse_backend(spec)) == canonical


def test_zero_size_is_rejected():
    assert (
        error_of("fsdp:d0") == "fsdp:d0: column 6: sizes start at 1, not d0 "
        "(write d1 or leave d out)"
    )


def test_leading_zero_is_rejected():
    assert error_of("fsdp:d04") == "fsdp:d04: column 6: size 04 has a leading zero (write d4)"


def test_dim_without_size_is_rejected():
    assert error_of("fsdp:dt2") == "fsdp:dt2: column 6: 'd' needs a size (e.g. d2)"


def test_repeated_dim_is_rejected():
    assert (
        error_of("fsdp:d4t2d2") == "fsdp:d4t2d2: column 9: 'd' given twice, first at "
        "column 5 (give each dim once)"
    )


def test_repeated_size_one_dim_is_rejected_too():
    assert "'p' given twice" in error_of("fsdp:d4p1p1")


def test_unknown_dim_is_rejected():
    assert (
        error_of("fsdp:x4") == "fsdp:x4: column 5: unknown dim 'x' "
        "(dims are d data, t tensor, p pipeline, c context, e expert)"
    )


def test_whitespace_anywhere_is_ignored():
    assert parse_backend(" sg lang : d 4\tt2\n") == parse_backend("sglang:d4t2")
    assert parse_backend("megatron : ( attn : d4 | ffn : e 2 )") == parse_backend(
        "megatron:(attn:d4|ffn:e2)"
    )


def test_error_column_counts_the_whitespace_the_user_typed():
    assert error_of("fsdp: d4 p2").startswith("fsdp: d4 p2: column 9: fsdp does not take 'p'")


def test_uppercase_is_rejected_with_the_lowercase_spelling():
    assert (
        error_of("FSDP:d8") == "FSDP:d8: column 0: backend strings are lowercase "
        "(use lowercase: fsdp:d8)"
    )
    assert (
        error_of("sglang:D4") == "sglang:D4: column 7: backend strings are lowercase "
        "(use lowercase: sglang:d4)"
    )


def test_bare_dims_need_a_backend_prefix():
    assert (
        error_of("d4t2") == "d4t2: column 0: a backend prefix is required "
        "(e.g. sglang:d4t2 or fsdp:d8)"
    )


def test_dot_instead_of_colon_suggests_the_colon():
    assert (
        error_of("sglang.d4t2") == "sglang.d4t2: column 6: use ':' after the backend, "
        "not '.' (write sglang:d4t2)"
    )


def test_unknown_backend_lists_the_known_ones():
    assert (
        error_of("deepspeed:d8") == "deepspeed:d8: column 0: unknown backend 'deepspeed' "
        "(known: sglang, vllm, fsdp, megatron, archon)"
    )


def test_misspelt_backend_gets_a_suggestion():
    assert error_of("sglan:d4").endswith("did you mean sglang?)")


def test_backend_glued_to_dims_suggests_the_colon():
    assert (
        error_of("fsdpd8") == "fsdpd8: column 4: unknown backend 'fsdpd' "
        "(put ':' after the backend: fsdp:d8)"
    )


def test_backend_without_dims_shows_an_example():
    assert error_of("fsdp") == "fsdp: column 4: expected ':' and dims after 'fsdp' (e.g. fsdp:d8)"
    assert error_of("vllm:") == "vllm:: column 5: expected dims after 'vllm:' (e.g. vllm:d2t2)"


def test_empty_string_is_a_clear_error():
    assert (
        error_of("") == "'': empty backend string "
        "(write <backend>:<dims>, e.g. sglang:d4t2 or fsdp:d8)"
    )
    assert "empty backend string" in error_of("  \t")


def test_non_string_is_an_allocation_error():
    assert "must be text" in error_of(None)  # type: ignore[arg-type]


def test_plus_joined_engines_point_to_per_engine_fields():
    assert error_of("sglang:d4+fsdp:d8") == (
        "sglang:d4+fsdp:d8: column 9: '+' joins several engines, which is allocation_mode "
        "syntax (this field holds one engine's backend: set rollout.backend=sglang:d4 and "
        "actor.backend=fsdp:d8 separately, or use allocation_mode)"
    )


def test_bar_joined_engines_point_to_per_engine_fields():
    assert error_of("sglang:d4|fsdp:d4").startswith(
        "sglang:d4|fsdp:d4: column 9: '|' joins several engines"
    )


def test_engine_name_in_brackets_points_to_per_engine_fields():
    assert error_of("sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4") == (
        "sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4: column 6: engine names like "
        "'[rollout]' are allocation_mode syntax (this field holds one engine's backend: set "
        "rollout.backend=sglang:d2, actor.backend=fsdp:d4 and critic.backend=fsdp:d4 "
        "separately, or use allocation_mode)"
    )


def test_unparsable_multi_engine_string_still_names_both_fields():
    assert error_of("sglang:d4+what").endswith(
        "(this field holds one engine's backend: set rollout.backend and actor.backend "
        "separately, or use allocation_mode)"
    )


def test_second_backend_without_plus_is_named():
    assert "a second backend with no '+' before it" in error_of("sglang:d4 fsdp:d4")


def test_stray_character_shows_the_fixed_spec():
    assert (
        error_of("fsdp:d4,t2") == "fsdp:d4,t2: column 7: unexpected ',' "
        "(write dims together: fsdp:d4t2)"
    )


def test_huge_size_is_an_allocation_error():
    assert "too large" in error_of("fsdp:d" + "9" * 5000)


# ---------------------------------------------------------------------------- expert parallel
def test_plain_expert_parallel_derives_expert_data_parallel():
    a = parse_backend("megatron:d4p2e2")
    assert (a.ep, a.etp, a.edp, a.world_size) == (2, 1, 2, 8)


def test_plain_expert_parallel_must_divide_the_world():
    assert error_of("megatron:d2e3") == (
        "megatron:d2e3: column 11: p*e (3) does not divide the world size d*t*p*c (2) "
        "(choose e so that p*e divides 2)"
    )


# -------------------------------------------------------------------------------- hybrid form
def test_hybrid_maps_attn_to_grid_and_ffn_to_experts():
    a = parse_backend("megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)")
    assert (a.dp, a.pp, a.tp, a.cp) == (4, 2, 2, 2)
    assert (a.edp, a.etp, a.ep, a.hybrid) == (2, 4, 2, True)
    assert a.world_size == 32


def test_hybrid_parentheses_are_optional():
    assert parse_backend("archon:attn:d4|ffn:e2") == parse_backend("archon:(attn:d4|ffn:e2)")


def test_hybrid_ffn_inherits_attn_p():
    assert parse_backend("megatron:attn:d2p2|ffn:e2").pp == 2
    assert parse_backend("megatron:attn:d2p2|ffn:e2") == parse_backend(
        "megatron:attn:d2p2|ffn:p2e2"
    )


def test_hybrid_p_must_be_equal_in_attn_and_ffn():
    assert error_of("megatron:attn:d4p2|ffn:p4e2") == (
        "megatron:attn:d4p2|ffn:p4e2: column 23: ffn p4 differs from attn p2 "
        "(p must be equal in attn and ffn; leave it out of ffn to inherit it)"
    )


def test_hybrid_ffn_d_is_derived():
    assert parse_backend("megatron:attn:d8|ffn:t2e2").edp == 2


def test_hybrid_underivable_ffn_d_is_an_error():
    assert error_of("megatron:attn:d8|ffn:e3t2") == (
        "megatron:attn:d8|ffn:e3t2: column 17: cannot derive expert dp: attn world_size (8) "
        "is not divisible by ffn ep*tp*pp (6) (choose ffn e, t, p whose product divides 8)"
    )


def test_hybrid_world_sizes_must_be_equal():
    assert error_of("megatron:attn:d4|ffn:d3e2") == (
        "megatron:attn:d4|ffn:d3e2: column 17: ffn world size d*p*t*e (6) differs from attn "
        "world size d*p*t*c (4) (both parts describe the same GPUs; leave ffn d out to derive it)"
    )


def test_hybrid_e_only_in_ffn():
    assert error_of("megatron:attn:d4e2|ffn:e2") == (
        "megatron:attn:d4e2|ffn:e2: column 16: attn does not take 'e' "
        "(e goes in the ffn part; attn takes d, t, p, c)"
    )


def test_hybrid_c_only_in_attn():
    assert error_of("megatron:attn:d4|ffn:c2") == (
        "megatron:attn:d4|ffn:c2: column 21: ffn does not take 'c' "
        "(c goes in the attn part; ffn takes d, t, p, e)"
    )


@pytest.mark.parametrize("backend", ["fsdp", "sglang", "vllm"])
def test_hybrid_only_for_megatron_and_archon(backend):
    assert f"{backend} has no attn/ffn form (only megatron and archon do" in error_of(
        f"{backend}:(attn:d4|ffn:e2)"
    )


def test_hybrid_unclosed_parenthesis_shows_the_closed_form():
    assert error_of("megatron:(attn:d4|ffn:e2") == (
        "megatron:(attn:d4|ffn:e2: column 24: missing ')' "
        "(close the attn/ffn form: megatron:(attn:d4|ffn:e2))"
    )


def test_hybrid_unmatched_closing_parenthesis_is_rejected():
    assert "unmatched ')'" in error_of("megatron:attn:d4|ffn:e2)")


def test_hybrid_without_attn_label_shows_the_full_form():
    assert error_of("megatron:d4|ffn:e2").endswith("(write megatron:(attn:d4|ffn:e2))")


def test_hybrid_without_backend_needs_a_prefix():
    assert (
        error_of("(attn:d4|ffn:e2)") == "(attn:d4|ffn:e2): column 0: a backend prefix is "
        "required (e.g. megatron:(attn:d4p2t2c2|ffn:d2p2t4e2))"
    )


# ------------------------------------------------------------------------- value and canonical
@pytest.mark.parametrize(
    "spec,canonical",
    [
        ("megatron:c2t2e2p2d2", "megatron:d2p2t2c2e2"),
        ("fsdp:d1", "fsdp:d1"),
        ("vllm:t1p1", "vllm:d1"),
        ("sglang:t2", "sglang:t2"),
        ("megatron:attn:p2t2d2|ffn:e4", "megatron:(attn:d2p2t2|ffn:p2e4)"),
        ("megatron:attn:d8|ffn:t2e2", "megatron:(attn:d8|ffn:d2t2e2)"),
        ("archon:(attn:d1|ffn:d1)", "archon:(attn:d1|ffn:d1)"),
    ],
)
def test_canonical_text_orders_dims_and_drops_size_one(spec, canonical):
    assert str(parse_backend(spec)) == canonical
    assert parse_backend(canonical) == parse_backend(spec)


def test_allocations_compare_by_value():
    assert parse_backend("fsdp:d8") == ModelAllocation("fsdp", dp=8)
    assert parse_backend("fsdp:d8") != parse_backend("fsdp:d4t2")
    assert len({parse_backend("fsdp:d8"), parse_backend("fsdp:p1d8")}) == 1


def test_hybrid_and_plain_forms_stay_distinct():
    assert parse_backend("megatron:attn:d4|ffn:e2") != parse_backend("megatron:d4e2")
    assert (
        parse_backend("megatron:attn:d4|ffn:e2").to_dict()
        == parse_backend("megatron:d4e2").to_dict()
    )


def test_to_dict_lists_every_size():
    assert parse_backend("megatron:d4p2e2").to_dict() == {
        "dp": 4,
        "tp": 1,
        "pp": 2,
        "cp": 1,
        "ep": 2,
        "etp": 1,
        "edp": 2,
    }


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(backend="fsdp", pp=2), "fsdp does not take 'p'"),
        (dict(backend="tgi", dp=2), "unknown backend 'tgi'"),
        (dict(backend="fsdp", dp=0), "d must be a positive int"),
        (dict(backend="megatron", dp=2, ep=3), "does not divide the world size"),
        (dict(backend="megatron", dp=4, etp=2, ep=2), "etp > 1 needs the attn/ffn form"),
        (dict(backend="fsdp", dp=4, hybrid=True), "fsdp has no attn/ffn form"),
        (dict(backend="megatron", dp=4, ep=2, edp=4), "edp 4 != world/(pp*etp*ep) = 2"),
    ],
)
def test_direct_construction_rejects_what_the_grammar_rejects(kwargs, message):
    with pytest.raises(
        AllocationError, match=message.replace("*", r"\*").replace("(", r"\(").replace(")", r"\)")
    ):
        ModelAllocation(**kwargs)


def test_allocation_error_is_a_value_error_with_the_parts():
    with pytest.raises(ValueError) as info:
        parse_backend("fsdp:d4p2")
    assert (info.value.spec, info.value.column) == ("fsdp:d4p2", 7)


# ---------------------------------------------------------------------------------- property
SIZES = st.sampled_from([1, 1, 2, 2, 3, 4, 8])


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


@st.composite
def allocations(draw) -> ModelAllocation:
    backend = draw(st.sampled_from(sorted(BACKEND_DIMS)))
    takes = BACKEND_DIMS[backend]
    size = {d: draw(SIZES) if d in takes else 1 for d in "dtpc"}
    world = size["d"] * size["t"] * size["p"] * size["c"]
    hybrid = "e" in takes and draw(st.booleans())
    ep = draw(st.sampled_from(divisors(world // size["p"]))) if "e" in takes else 1
    etp = draw(st.sampled_from(divisors(world // (size["p"] * ep)))) if hybrid else 1
    return ModelAllocation(
        backend, size["d"], size["t"], size["p"], size["c"], ep, etp, hybrid=hybrid
    )


@settings(max_examples=400, deadline=None)
@given(allocations())
def test_every_valid_allocation_round_trips_through_its_text(a):
    text = str(a)
    assert parse_backend(text) == a
    assert str(parse_backend(text)) == text


@settings(max_examples=300, deadline=None)
@given(allocations(), st.randoms(use_true_random=False))
def test_dim_order_and_spaces_do_not_change_the_value(a, rnd):
    backend, dims = str(a).split(":", 1)
    if a.hybrid:
        return  # the attn/ffn sections have a fixed order; covered by the round trip
    pieces = re.findall(r"[a-z][0-9]+", dims)
    rnd.shuffle(pieces)
    spaced = " ".join([backend, ":", *pieces])
    assert parse_backend(spaced) == a


GRAMMAR_CHARS = "dtpceaf nsglvmorhix:()|+[]._,0123456789DT" + "attnffnsglangvllmfsdpmegatron"


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.text(alphabet=GRAMMAR_CHARS, max_size=40),
        st.builds(
            lambda b, r: b + r,
            st.sampled_from([f"{b}:" for b in BACKEND_DIMS]),
            st.text(alphabet=GRAMMAR_CHARS, max_size=30),
        ),
    )
)
def test_random_text_raises_nothing_but_a_one_line_allocation_error(text):
    try:
        a = parse_backend(text)
    except AllocationError as e:
        assert "\n" not in str(e)
    else:
        assert parse_backend(str(a)) == a
