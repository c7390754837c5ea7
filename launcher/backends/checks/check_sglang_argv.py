"""Check SGLang server command lines with SGLang's own parser, without a GPU or a server.

Run in an interpreter that has SGLang (`make check-sglang` builds .venv-sglang; never the
launcher's):
    python -m launcher.backends.checks.check_sglang_argv -- <args after -m sglang.launch_server>
    python -m launcher.backends.checks.check_sglang_argv < items.json      # many at once, one
    import
items.json: a JSON list; each item an argv list, or {"argv": [...], "config": {...},
"keep_model": bool}. Prints a JSON list of {"ok", "error", "parsed"} on stdout; SGLang's log
lines go to stderr.

A check is SGLang's `prepare_server_args` (argparse: unknown flags, bad values), then
`resolve_once` and `check_server_args` with `--device cuda` appended when no --device is given
(SGLang's own cross-flag checks: (tp*pp) % nnodes, multi-node --dp-size...). resolve_once reads
the model's config.json, so `--model-path` is replaced by a folder holding only a generated
Llama config.json (fields from "config" override it) unless keep_model is true.

SGLang from PyPI imports triton and torchvision unconditionally; on a machine without them
its own Apple-Silicon stubs (sglang/_platform_stubs.py) stand in for triton, and a module stub
for torchvision (installed after transformers has decided torchvision is absent).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import platform
import sys
import tempfile
from typing import Any

_OUT = os.fdopen(os.dup(1), "w")  # our JSON; SGLang's logs go to stderr
os.dup2(2, 1)

from launcher.backends.checks import argparse_error, checker_main, describe  # noqa: E402

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 16,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _load_sglang_stubs() -> Any:
    """sglang/_platform_stubs.py, loaded without running sglang/__init__ (which needs triton)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang is not installed"
    path = os.path.join(list(spec.submodule_search_locations)[0], "_platform_stubs.py")
    stub_spec = importlib.util.spec_from_file_location("_sglang_platform_stubs", path)
    assert stub_spec is not None and stub_spec.loader is not None
    module = importlib.util.module_from_spec(stub_spec)
    sys.modules[stub_spec.name] = module
    stub_spec.loader.exec_module(module)
    return module


def _stand_in_for_triton(stubs: Any) -> None:
    """Run SGLang's Apple-Silicon stub installer as if on one: it stubs triton when absent."""
    import torch

    saved = (sys.platform, platform.machine, torch.backends.mps.is_available)
    sys.platform, platform.machine = "darwin", (lambda: "arm64")
    torch.backends.mps.is_available = lambda: True  # type: ignore[assignment]
    try:
        stubs.install_platform_stubs()
    finally:
        sys.platform, platform.machine, torch.backends.mps.is_available = saved


class _TorchvisionStub:
    """A meta-path finder answering `import torchvision...` with SGLang's mock modules."""

    def __init__(self, stubs: Any):
        self.mock = stubs._MockModule

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torchvision" and not fullname.startswith("torchvision."):
            return None
        module = self.mock(fullname)
        sys.modules[fullname] = module
        parent, _, child = fullname.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)
        return module.__spec__


def _import_prepare_server_args() -> Any:
    if (
        importlib.util.find_spec("triton") is None
        or importlib.util.find_spec("torchvision") is None
    ):
        stubs = _load_sglang_stubs()
        if importlib.util.find_spec("triton") is None:
            _stand_in_for_triton(stubs)
        if importlib.util.find_spec("torchvision") is None:
            import transformers.image_utils  # noqa: F401  (decides: no torchvision, use PIL)
            import transformers.modeling_utils  # noqa: F401

            sys.meta_path.insert(0, _TorchvisionStub(stubs))
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args


prepare_server_args = _import_prepare_server_args()


def _with_model(argv: list[str], config: dict, folder: str) -> list[str]:
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({**TINY_LLAMA, **config}, f)
    out = list(argv)
    for i, arg in enumerate(out):
        if arg in ("--model-path", "--model") and i + 1 < len(out):
            out[i + 1] = folder
        elif arg.startswith(("--model-path=", "--model=")):
            out[i] = arg.partition("=")[0] + "=" + folder
    return out


def check(argv: list[str]) -> dict[str, Any]:
    if not any(a == "--device" or a.startswith("--device=") for a in argv):
        argv = argv + ["--device", "cuda"]
    args = prepare_server_args(argv)
    args.resolve_once()
    args.check_server_args()
    return {
        "tp": args.tp_size,
        "pp": args.pp_size,
        "dp": args.dp_size,
        "attn_dp": getattr(args, "attn_dp_size", None),
        "ep": args.ep_size,
        "host": args.host,
        "port": args.port,
        "nccl_port": args.nccl_port,
        "nnodes": args.nnodes,
        "node_rank": args.node_rank,
        "dist_init_addr": args.dist_init_addr,
        "mem_fraction_static": args.mem_fraction_static,
        "memory_saver": args.enable_memory_saver,
        "served_model_name": args.served_model_name,
    }


def verdict(item: dict) -> dict[str, Any]:
    said = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="sglang-check-") as folder:
        argv = list(item["argv"])
        if not item.get("keep_model"):
            argv = _with_model(argv, item.get("config") or {}, folder)
        try:
            with contextlib.redirect_stderr(said):
                return {"ok": True, "error": "", "parsed": check(argv)}
        except SystemExit as exc:
            return {"ok": False, "error": argparse_error(said.getvalue(), exc.code), "parsed": None}
        except Exception as exc:  # SGLang's own verdict, reported, not raised
            return {"ok": False, "error": describe(exc), "parsed": None}


if __name__ == "__main__":
    sys.exit(checker_main(sys.argv[1:], verdict, _OUT))
