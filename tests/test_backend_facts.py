"""Backend facts are data (launcher/spec/backend_facts.py): parsing and reading a plan import no
backend and no memory module, another package's backend is loaded only when its name is looked
up, and a broken one is one error line for its name that never breaks another backend."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.backends.kinds import KIND_CLASSES, backend
from launcher.spec import registry
from launcher.spec.backend_facts import BUILTIN_BACKENDS
from tests.plans import plan_dict

ROOT = Path(__file__).resolve().parent.parent

READ_ONLY_FACTS = """
import json, sys
from launcher.spec.alloc import parse_backend
for text in ("sglang:d4t2", "vllm:d2t2", "fsdp:d8", "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)"):
    parse_backend(text)
from launcher.spec.plan import Plan
plan = Plan.from_dict(json.load(sys.stdin))
assert plan.components["rollout"].kind == "serve", plan.components
print(json.dumps(sorted(m for m in sys.modules
                        if m.startswith(("launcher.backends", "launcher.memory")))))
"""


def python(code: str, root: Path, stdin: str = "") -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with `root` (another package's files) on the path."""
    path = os.pathsep.join(filter(None, [str(root), str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code],
        input=stdin,
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path, "CUDA_VISIBLE_DEVICES": ""},
        timeout=120,
    )


def install(root: Path, entries: dict[str, str], modules: dict[str, str]) -> None:
    """Another package's modules and the dist-info an installer would leave (no pip)."""
    for name, text in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(text))
    info = root / "other_backends-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: other-backends\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[areal_launch.backends]\n{lines}")


def test_parsing_and_reading_a_plan_import_no_backend_and_no_memory_module(tmp_path):
    plan = plan_dict(**{"cluster.device": "cpu"})
    done = python(READ_ONLY_FACTS, tmp_path, json.dumps(plan))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_a_broken_backend_package_is_one_error_for_its_name_and_breaks_no_other(tmp_path):
    install(
        tmp_path,
        {"brokenlm": "brokenlm_facts:FACTS", "notfacts": "notfacts:FACTS"},
        {"brokenlm_facts": "import a_module_nobody_installed\n", "notfacts": "FACTS = 3\n"},
    )
    done = python(READ_ONLY_FACTS, tmp_path, json.dumps(plan_dict()))
    assert done.returncode == 0, done.stderr  # the built-ins parse and plans read as before

    cli = [sys.executable, "-m", "launcher.cli.main", "plan", "--json", "cluster.device=cpu"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    fine = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert fine.returncode == 0, fine.stderr
    for name, why in (("brokenlm", "No module named"), ("notfacts", "is a int, not a Backend")):
        out = subprocess.run(
            [*cli, f"rollout.backend={name}:d1"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
        )
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, out.stderr
        assert lines[0].startswith("error:") and repr(name) in lines[0] and why in lines[0]


def test_another_packages_backend_is_loaded_only_when_its_name_is_looked_up(tmp_path):
    install(
        tmp_path,
        {"lazylm": "lazylm_facts:FACTS"},
        {
            "lazylm_facts": """
                from launcher.spec.backend_facts import CARD_BUDGET, SERVE, BackendFacts
                FACTS = BackendFacts("lazylm", SERVE, "lazylm_facts:Nothing", dims="dt",
                                     example="lazylm:d1", memory_model=CARD_BUDGET)
            """
        },
    )
    done = python(
        "import sys\n"
        "from launcher.spec.alloc import parse_backend\n"
        "parse_backend('vllm:d2')\n"
        "before = 'lazylm_facts' in sys.modules\n"
        "alloc = parse_backend('lazylm:d2t2')\n"
        "print(before, alloc.kind, alloc.world_size, 'lazylm_facts' in sys.modules)\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "serve", "4", "True"]


@pytest.mark.parametrize("name", sorted(BUILTIN_BACKENDS))
def test_each_builtin_record_is_valid_and_names_a_class_of_its_kind(name):
    facts = BUILTIN_BACKENDS[name]
    assert facts.problem() is None
    found = backend(name)
    assert isinstance(found, KIND_CLASSES[facts.kind]) and found.facts is facts
    assert registry.backend_options(name) is type(found).Options


def test_a_record_that_says_nothing_sensible_says_why():
    bad = BUILTIN_BACKENDS["vllm"]
    for changes, said in (
        ({"kind": "gpu"}, "kind 'gpu'"),
        ({"dims": "dq"}, "dims 'dq'"),
        ({"memory_model": "fsdp2"}, "a serve backend takes card, static"),
        ({"behaviour": "vllm_module"}, "'package.module:Class'"),
    ):
        problem = dataclasses.replace(bad, **changes).problem()
        assert problem is not None and said in problem
