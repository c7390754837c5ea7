"""Which workers RLinf's entry scripts start, on what conditions (RLinf's examples/**/*.py at
main, read by hand: each entry's `create_group(...).launch(...)` calls and the `if`s around
them). A section in an RLinf config holds settings whether or not its worker runs; what runs
is what the entry named by `trainer.entry` starts. Pure: the config comes in as plain values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Callable, Mapping, Optional

from launcher.spec.errors import ConfigError

Why = dict[str, str]  # component -> why RLinf's entry starts it (for the plan's notes)
Config = Mapping[str, Any]


@dataclass(frozen=True)
class Extra:
    """A group RLinf's entry starts beyond the engines and sections it shares with ours: our
    component (`components.<name>`), its placement (None: the config's own, or `beside`),
    and why it is on (for the plan's note)."""

    component: Mapping[str, Any]
    placement: Any
    why: str


@dataclass(frozen=True)
class Entry:
    """One of RLinf's entry scripts: what it starts (`starts`), how its rollout runs
    (`serve`: SGLang/vLLM engines, `worker`: a policy worker per process, "": none), and what
    it starts that areal-launch cannot yet plan (one line, or ""); `extra`: the groups it
    starts that have no section or engine of ours (an agent loop, tool groups, a judge)."""

    path: str
    rollout: str
    starts: Callable[[Config], Why]
    missing: str = ""
    extra: Callable[[Config], dict[str, Extra]] = lambda cfg: {}


def _get(cfg: Config, key: str, default: Any = None) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return default if node is None else node


def _count(cfg: Config, key: str) -> int:
    """A count RLinf's entry reads (a tp size, a node count): 1 when unset."""
    value = _get(cfg, key, 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}={value!r}: a whole number from 1")
    return value


def _use_reward_model(cfg: Config) -> bool:
    return bool(_get(cfg, "reward.use_reward_model", False))


def _embodied(cfg: Config, path: str) -> Why:
    out = {name: f"{path} always starts it" for name in ("actor", "rollout", "env")}
    if _use_reward_model(cfg) and not _get(cfg, "reward.standalone_realworld", False):
        out["reward"] = "reward.use_reward_model: true (and no standalone_realworld)"
    return out


def _offline(cfg: Config) -> Why:
    out = {"actor": "train_offline_rl.py always starts it"}
    if (_get(cfg, "runner.val_check_interval", 0) or 0) > 0 or _get(cfg, "runner.only_eval"):
        for name in ("env", "rollout"):
            out[name] = "runner.val_check_interval > 0 or runner.only_eval: it evaluates"
    return out


def collocated(cfg: Config) -> bool:
    """Whether actor and rollout share their GPUs (RLinf's collocated mode): one placement
    key or the same GPU text."""
    placement = _get(cfg, "cluster.component_placement", {}) or {}
    where: dict[str, str] = {}
    for key, value in placement.items():
        for name in (p.strip() for p in str(key).split(",")):
            where[name] = f"{key}" if "," in str(key) else str(value)
    a, r = where.get("actor"), where.get("rollout")
    return a is not None and (a == r or ("," in a and "rollout" in a.split(",")))


def _model_parallel(cfg: Config, path: str, reward: bool, agents: bool, tool: bool) -> Why:
    """Reasoning and agent entries (ModelParallelComponentPlacement): rollout engines, the
    actor, a forward-only inference copy when disaggregated and recompute_logprobs."""
    out = {"rollout": f"{path} always starts it", "actor": f"{path} always starts it"}
    if reward:
        out["reward"] = f"{path} always starts a reward group on its placement"
    if agents:
        out["agentloop"] = f"{path} starts one agent loop beside each rollout instance"
    if tool:
        out["tool"] = f"{path} starts one tool worker on node 0"
    if not collocated(cfg) and _get(cfg, "algorithm.recompute_logprobs", False):
        out["inference"] = "disaggregated with algorithm.recompute_logprobs: true"
    if _get(cfg, "critic.use_critic_model", False):
        out["critic"] = "critic.use_critic_model: true"
    return out


# RLinf's online coding entry: the router its users' requests reach and the server rollout
# worker behind it, by our component names and their RLinf modules
ONLINE_SERVERS = {
    "online_router": "online_router_worker",
    "server_rollout": "server_rollout_worker",
}


def _online_coding(cfg: Config, path: str) -> Why:
    """main_coding_online_rl.py: rollout engines, the (PPO) actor, and a forward-only
    inference copy when disaggregated with recompute_logprobs; no reward group, no critic."""
    out = {"rollout": f"{path} always starts it", "actor": f"{path} always starts it"}
    if not collocated(cfg) and _get(cfg, "algorithm.recompute_logprobs", False):
        out["inference"] = "disaggregated with algorithm.recompute_logprobs: true"
    return out


def _only(*names: str) -> Callable[[Config], Why]:
    return lambda cfg: {n: "the entry always starts it" for n in names}


ENTRIES = {
    e.path: e
    for e in (
        Entry(
            "embodiment/train_embodied_agent.py",
            "worker",
            lambda c: _embodied(c, "train_embodied_agent.py"),
        ),
        Entry("embodiment/train_async.py", "worker", lambda c: _embodied(c, "train_async.py")),
        Entry("embodiment/train_offline_rl.py", "worker", _offline),
        Entry("embodiment/collect_real_data.py", "", _only("env")),
        Entry("reward/realworld_collect_process_dataset.py", "", _only("env")),
        Entry("reward/eval_realworld_teleop.py", "", _only("env")),
        Entry("reward/train_reward_model.py", "", _only("actor")),
        Entry("sft/train_vla_sft.py", "", _only("actor")),
        Entry("sft/train_vlm_sft.py", "", _only("actor")),
        Entry("steam/train_steam.py", "", _only("actor")),
        Entry("recap/train_value.py", "", _only("actor")),
        Entry("cfg_rl/train_cfg.py", "", _only("actor")),
        Entry(
            "reasoning/main_grpo.py",
            "serve",
            lambda c: _model_parallel(c, "main_grpo.py", True, False, False),
        ),
        Entry(
            "searchr1/train.py",
            "serve",
            lambda c: _model_parallel(c, "searchr1/train.py", False, True, True),
        ),
        Entry(
            "rstar2/main_rstar2.py",
            "serve",
            lambda c: _model_parallel(c, "main_rstar2.py", True, True, True),
        ),
        Entry(
            "coding_online_rl/main_coding_rl_llm_judge.py",
            "serve",
            lambda c: _model_parallel(c, "main_coding_rl_llm_judge.py", True, False, False),
        ),
        Entry(
            "searchr1/eval.py",
            "serve",
            lambda c: {
                "rollout": "searchr1/eval.py always starts it",
                "agentloop": "searchr1/eval.py starts one agent loop beside each rollout instance",
                "tool": "searchr1/eval.py starts one tool worker on node 0",
            },
        ),
        Entry(
            "coding_online_rl/main_coding_online_rl.py",
            "serve",
            lambda c: _online_coding(c, "main_coding_online_rl.py"),
            extra=lambda c: {
                name: Extra(
                    {"entry": f"-m rlinf.workers.rollout.server.{module}"},
                    "0",
                    "one process on GPU 0 (PackedPlacementStrategy(0, 0))",
                )
                for name, module in ONLINE_SERVERS.items()
            },
        ),
        Entry(
            "wideseek_r1/train.py",
            "serve",
            _only("rollout", "actor"),
            extra=lambda c: _wideseek(c, "wideseek_r1/train.py"),
        ),
        Entry(
            "wideseek_r1/eval.py",
            "serve",
            _only("rollout"),
            extra=lambda c: _wideseek(c, "wideseek_r1/eval.py"),
        ),
        Entry(
            "calc_x/main.py",
            "serve",
            _only(),
            "Agent Lightning's own trainer and its runner processes",
        ),
    )
}
WIDESEEK_TOOLS = ("search", "access")  # its tool groups, by the names it launches them with


def _wideseek(cfg: Config, path: str) -> dict[str, Extra]:
    """WideSeek-R1's groups beside its rollout (and, training, its actor): an agent loop on the
    node of each rollout instance, a judge engine on `rollout_judge`'s GPUs when
    `agentloop.use_local_judge` (the rollout's backend, one instance per rollout tp GPUs),
    and its two tool groups (search, access) on every node: one process a node each for an
    online eval (`tools.online`), else 32."""
    if path.endswith("eval.py") and _get(cfg, "rollout.use_fixed_worker", False):
        raise ConfigError(
            f"rollout.use_fixed_worker=true: RLinf's {path} splits the rollout's GPUs in halves "
            "between two engines (rollout, rollout_fixed_worker); areal-launch does not plan "
            "this yet (set rollout.use_fixed_worker=false for one engine)"
        )
    out = {
        "agentloop": Extra(
            {"entry": "-m rlinf.agents.wideseek_r1.wideseek_r1", "beside": "rollout"},
            None,
            "one agent loop on the node of each rollout instance",
        )
    }
    if _get(cfg, "agentloop.use_local_judge", False):
        judge: dict[str, Any] = {
            "kind": "serve",
            "backend": str(_get(cfg, "rollout.rollout_backend", "sglang")).lower(),
            "parallel": {"tp": _count(cfg, "rollout.tensor_parallel_size")},
        }
        if _get(cfg, "rollout_judge.model.model_path") is not None:
            judge["model_path"] = str(_get(cfg, "rollout_judge.model.model_path"))
        out["rollout_judge"] = Extra(
            judge,
            None,
            "agentloop.use_local_judge: true; a judge engine of the rollout's backend, on "
            "its placement",
        )
    online = path.endswith("eval.py") and _get(cfg, "tools.online", False) is True
    per_node = 1 if online else 32
    nodes = _count(cfg, "cluster.num_nodes")
    ranks = "0" if nodes == 1 else f"0-{nodes - 1}"
    spread = {"node_group": "node", "placement": f"{ranks}:0-{nodes * per_node - 1}"}
    for name in WIDESEEK_TOOLS:
        out[name] = Extra(
            {"entry": "-m rlinf.agents.wideseek_r1.tools", "options": {"tool_names": [name]}},
            spread,
            f"{per_node} {name} tool worker(s) on every node"
            + ("; tools.online" if online else ""),
        )
    return out


# the embodied entry starts an SGLang server for an API reward model it hosts itself
REWARD_SERVER = "reward_server"


def entry_of(trainer_entry: str) -> Optional[Entry]:
    """The RLinf entry `trainer.entry` names (its last two path parts), or None."""
    parts = PurePosixPath(str(trainer_entry).strip()).parts
    return ENTRIES.get("/".join(parts[-2:])) if len(parts) >= 2 else None


def reward_server(cfg: Config, entry: Entry) -> bool:
    """train_embodied_agent.py starts an SGLang server for an API reward model without an
    api_base (`launch_sglang_api`)."""
    return (
        entry.path == "embodiment/train_embodied_agent.py"
        and _use_reward_model(cfg)
        and str(_get(cfg, "reward.worker_type", "model")).lower() == "api"
        and not str(_get(cfg, "reward.api.api_base", "") or "").strip()
    )
