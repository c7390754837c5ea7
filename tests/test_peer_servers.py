"""AReaL's `vllm:` and `sglang:` sections start the rollout servers as AReaL's launcher would
(launcher/planning/peer_servers.py): keys our backend's options declare set them, the rest are
server flags written AReaL's way, AReaL's own keys make no flag, the other backend's section is
one note, and a flag the engine's parser refuses is one error line naming the key as written.
Plan level (milliseconds each), plus one check with vLLM's own parser (~10 s). The configs are
ours, written in AReaL's vocabulary; none is copied from AReaL."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli.launch import build_request
from launcher.node.ports import counted_ports
from launcher.spec.errors import ConfigError
from tests.areal_launch import one_error_line, prepared_in, run

# an AReaL-style experiment with both server sections, the rollout on vLLM
VLLM_RUN = """\
experiment_name: peer-servers
trial_name: t0
seed: 11
cluster: {n_nodes: 1, n_gpus_per_node: 4}
rollout: {backend: "vllm:d2", use_lora: false}
actor: {backend: "fsdp:d2", path: /models/tiny, dtype: bfloat16, lora_rank: 8}
vllm:
  model: ${actor.path}
  seed: ${seed}
  dtype: ${actor.dtype}
  max_model_len: 4096
  gpu_memory_utilization: 0.7
  skip_tokenizer_init: false
  disable_sliding_window: false
  enable_lora: ${rollout.use_lora}
  max_lora_rank: ${actor.lora_rank}
  max_num_seqs: 32
  enable_prefix_caching: true
  distributed_executor_backend: mp
  lora_modules: null
  tokenizer_mode: ""
sglang:
  model_path: ${actor.path}
  mem_fraction_static: 0.8
"""
# the rollout's backend from AReaL's allocation_mode (its rollout section names none)
SGLANG_RUN = """\
experiment_name: peer-servers
trial_name: t1
seed: 3
allocation_mode: sglang:d2+fsdp:d2
cluster: {n_nodes: 1, n_gpus_per_node: 4}
rollout: {max_concurrent_rollouts: 16}
actor: {path: /models/tiny, dtype: bfloat16}
sglang:
  model_path: ${actor.path}
  random_seed: ${seed}
  dtype: ${actor.dtype}
  context_length: 8192
  mem_fraction_static: 0.6
  max_running_requests: null
  skip_tokenizer_init: true
  enable_multithread_load: true
  dp_size: 1
  attention_backend: flashinfer
vllm:
  model: ${actor.path}
  max_model_len: 8192
"""
ENTRY = "examples/tiny/train.py"  # another trainer's script: plan does not need it to exist
CUDA = ["cluster.device=cuda", f"trainer.entry={ENTRY}"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("peer")
    (d / "on_vllm.yaml").write_text(VLLM_RUN)
    (d / "on_sglang.yaml").write_text(SGLANG_RUN)
    (d / "sft.yaml").write_text(
        "experiment_name: sft\ntrial_name: t\nseed: 1\n"
        "cluster: {n_nodes: 1, n_gpus_per_node: 2}\n"
        "actor: {backend: 'fsdp:d2', path: /m}\n"
        "vllm: {max_model_len: 1024}\n"
    )
    (d / "ours.yaml").write_text("defaults: [config, _self_]\nvllm: {max_num_seqs: 8}\n")
    return d


def prepared(folder: Path, name: str, overrides=()):
    return prepared_in(folder, name, [*CUDA, *overrides])


def server_argv(prep) -> list[str]:
    _, request = build_request(prep, Path("/runs/r"), counted_ports(30000))
    servers = [p for p in request.processes if p.role == "server"]
    assert len({p.argv[3:] for p in servers if "--port" not in p.argv}) <= 1
    argv = list(servers[0].argv)
    port = argv.index("--port")
    return argv[:port] + argv[port + 2 :]  # each server its own port


def flags(argv: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            out[a] = [v for v in argv[i + 1 : i + 2] if not v.startswith("--")]
    return out


def test_the_vllm_section_configures_the_servers_as_areal_writes_them(folder):
    prep = prepared(folder, "on_vllm")
    got = flags(server_argv(prep))
    # keys our options declare: set as our options (interpolations read from the file)
    assert got["--max-model-len"] == ["4096"] and got["--gpu-memory-utilization"] == ["0.7"]
    assert got["--seed"] == ["11"] and got["--dtype"] == ["bfloat16"]
    # the rest: AReaL's flags (true: bare), in the file's order, after ours
    assert server_argv(prep)[-3:] == ["--max-num-seqs", "32", "--enable-prefix-caching"]
    assert got["--max-lora-rank"] == ["8"]
    # null, false and "" make no flag; the model is the rollout's, the executor ours already
    for absent in (
        "--skip-tokenizer-init",
        "--disable-sliding-window",
        "--enable-lora",
        "--lora-modules",
        "--tokenizer-mode",
    ):
        assert absent not in got
    assert got["--model"] == ["/models/tiny"] and got["--distributed-executor-backend"] == ["mp"]
    assert "sglang: not read: the rollout runs vllm (its servers take vllm:)" in prep.planned.notes
    assert prep.run.handoff.config["vllm"]["max_num_seqs"] == 32  # the entry's too
    assert dict(prep.planned.flag_origins) == {
        "--max-num-seqs": "vllm.max_num_seqs",
        "--enable-prefix-caching": "vllm.enable_prefix_caching",
        "--max-lora-rank": "vllm.max_lora_rank",
    }


def test_our_keys_win_over_the_section_with_a_note_and_its_keys_take_overrides(folder):
    prep = prepared(
        folder,
        "on_vllm",
        [
            "rollout.vllm.max_model_len=1024",
            "rollout.server_args.max_num_seqs=8",
            "vllm.gpu_memory_utilization=0.5",
            "++vllm.block_size=32",
        ],
    )
    got = flags(server_argv(prep))
    assert got["--max-model-len"] == ["1024"] and got["--max-num-seqs"] == ["8"]
    assert got["--gpu-memory-utilization"] == ["0.5"] and got["--block-size"] == ["32"]
    assert (
        "vllm.max_model_len=4096 not used: rollout.vllm.max_model_len=1024 is" in prep.planned.notes
    )
    assert (
        "vllm.max_num_seqs=32 not used: rollout.server_args.max_num_seqs=8 is" in prep.planned.notes
    )


def test_the_sglang_section_follows_the_backend_allocation_mode_names(folder):
    prep = prepared(folder, "on_sglang")
    assert {n: str(c.alloc) for n, c in prep.plan.components.items()} == {
        "rollout": "sglang:d2",
        "actor": "fsdp:d2",
    }
    argv = server_argv(prep)
    got = flags(argv)
    assert got["--context-length"] == ["8192"] and got["--mem-fraction-static"] == ["0.6"]
    assert got["--dtype"] == ["bfloat16"] and got["--random-seed"] == ["3"]
    assert "--skip-tokenizer-init" in got and got["--attention-backend"] == ["flashinfer"]
    # AReaL passes enable_multithread_load inside the loader's config; dp_size 1 is no flag
    assert got["--model-loader-extra-config"] == ['{"enable_multithread_load":true}']
    assert "--dp-size" not in got and "--max-running-requests" not in got
    assert (
        "vllm: not read: the rollout runs sglang (its servers take sglang:)" in prep.planned.notes
    )


def test_areals_dp_size_with_dp_attention_is_the_attention_dp_size(folder):
    prep = prepared(
        folder,
        "on_sglang",
        [
            "rollout.backend=sglang:t4",
            "actor.backend=fsdp:d4",
            "allocation_mode=null",
            "++sglang.dp_size=2",
            "++sglang.enable_dp_attention=true",
            "cluster.n_gpus_per_node=8",
        ],
    )
    got = flags(server_argv(prep))
    assert got["--attn-dp-size"] == ["2"] and "--dp-size" not in got


def test_a_section_without_a_rollout_is_one_note(folder):
    prep = prepared(folder, "sft")
    assert "vllm: not read: this run has no rollout" in prep.planned.notes


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "++vllm.tensor_parallel_size=2",
            "vllm.tensor_parallel_size: --tensor-parallel-size would "
            "change the GPU count of an instance",
        ),
        ("++vllm.port=9000", "vllm.port: --port"),
        ("vllm.max_model_len=lots", "invalid value in 'vllm.max_model_len=lots'"),
    ],
)
def test_a_section_key_the_launcher_owns_or_of_the_wrong_type_names_it(folder, override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        prepared(folder, "on_vllm", [override])


def test_our_recipe_says_where_a_server_section_goes_in_our_keys(folder):
    with pytest.raises(ConfigError) as err:
        prepared_in(folder, "ours")
    assert "unknown config key 'vllm'" in str(err.value)
    assert (
        "with our recipe write rollout.vllm.KEY (the backend's options) or "
        "rollout.server_args.KEY (any other flag)" in str(err.value)
    )


@pytest.mark.vllm
def test_a_flag_vllm_does_not_take_is_one_error_line_naming_the_key(tmp_path):
    """The dry run's preflight parses the servers' argv with vLLM's own parser (the launcher's
    interpreter has vLLM here): the refused flag is named as the file wrote it."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "train.py").write_text("")
    (tmp_path / "bad.yaml").write_text(
        VLLM_RUN.replace("/models/tiny", str(tmp_path / "model")).replace(
            "max_num_seqs: 32", "max_num_sequences: 32"
        )
    )
    line = one_error_line(
        run(
            "-cd",
            str(tmp_path),
            "-cn",
            "bad",
            "cluster.device=cpu",
            f"trainer.entry={tmp_path / 'train.py'}",
            "launcher.dry_run=true",
            "launcher.check_memory=off",
            f"hydra.run.dir={tmp_path}/run",
            timeout=180,
        )
    )
    assert line == (
        "error: not ready to run: rollout-0: vllm.max_num_sequences "
        "(--max-num-sequences) is refused by vllm.entrypoints.openai.api_server's "
        "own parser: unrecognized arguments: --max-num-sequences (set it to what "
        "the server takes, or remove it)"
    )
