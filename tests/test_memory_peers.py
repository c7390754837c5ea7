"""The worked example of reference/memory.md §6 (Qwen3-8B, fsdp:d8 + sglang:d8 collocated on
8 x 80 GB, mfs 0.8, 16384 tokens with checkpointing): refused without offload, with the change
that fits. Peers' published configurations live in tests/peer_corpus.py (test_memory_corpus.py).
"""

from __future__ import annotations

from launcher.memory.capacity import gpu_memory_from_name
from launcher.memory.estimate import InferenceOptions, TrainOptions
from launcher.memory.fix import memory_report
from launcher.spec.cluster import ClusterSpec
from launcher.spec.offload import Offload
from tests.memory_plans import apply_override, engine
from tests.model_configs import shape


def worked_example(offload: bool):
    model = shape("Qwen3-8B")
    return [
        engine(
            "rollout",
            "sglang:d8",
            range(8),
            model,
            InferenceOptions(mem_fraction=0.8, release=offload),
        ),
        engine(
            "actor",
            "fsdp:d8",
            range(8),
            model,
            TrainOptions(
                gradient_checkpointing=True,
                max_tokens_per_mb=16384,
                offload=Offload(offload, offload, offload),
            ),
        ),
    ]


def test_the_worked_example_fits_with_offload_and_is_refused_without_with_a_fix_that_fits():
    capacity = gpu_memory_from_name("H100")
    assert capacity is not None
    cluster = ClusterSpec(1, 8)
    assert memory_report(worked_example(True), cluster, capacity).fits is True
    refused = memory_report(worked_example(False), cluster, capacity)
    assert refused.fits is False and refused.problems[0].fix
    fixed = apply_override(worked_example(False), refused.problems[0].fix)
    assert memory_report(fixed, cluster, capacity).fits is True
