"""Check vLLM server command lines with vLLM's own parser, without starting a server.

Run in an interpreter that has vLLM (never inside the launcher):
    python -m launcher.backends.checks.check_vllm_argv [--deep] -- <args after -m ...api_server>
    python -m launcher.backends.checks.check_vllm_argv < items.json      # many at once, one import
items.json: a JSON list; each item an argv list, or {"argv": [...], "deep": bool, "env": {}}.
Prints a JSON list of {"ok", "error", "parsed"} (one per item) on stdout; vLLM's own log lines
go to stderr. A check is: vLLM's serve parser (unknown flags, bad values: argparse exits 2),
its cross-flag checks, AsyncEngineArgs.from_cli_args; `deep` also builds the whole engine
config (reads the model's config.json, checks parallel sizes against this platform), still
without starting an engine. `env` is applied around that item (e.g. VLLM_CPU_KVCACHE_SPACE).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Any, Iterator

# vLLM logs to stdout: keep stdout for our JSON, send everything else to stderr
_OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

from launcher.backends.checks import argparse_error, checker_main, describe  # noqa: E402

try:  # vLLM 0.32 moved the serve parser
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:  # older vLLM
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args  # type: ignore[no-redef]


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check(argv: list[str], deep: bool = False) -> dict[str, Any]:
    """Parse like the server does; raise SystemExit (argparse) or the check's own error."""
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm.entrypoints.openai.api_server"))
    args = parser.parse_args(argv)
    args.subparser = "serve"
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    validate_parsed_serve_args(args)
    engine = AsyncEngineArgs.from_cli_args(args)
    if deep:
        engine.create_engine_config()
    return {
        "tp": engine.tensor_parallel_size,
        "pp": engine.pipeline_parallel_size,
        "dp": engine.data_parallel_size,
        "host": args.host,
        "port": args.port,
        "model": engine.model,
        "served_model_name": engine.served_model_name,
        "sleep_mode": engine.enable_sleep_mode,
        "dtype": engine.dtype,
        "executor": engine.distributed_executor_backend,
        "enforce_eager": engine.enforce_eager,
    }


def verdict(item: dict) -> dict[str, Any]:
    said = io.StringIO()
    try:
        with environment(item.get("env") or {}), contextlib.redirect_stderr(said):
            return {
                "ok": True,
                "error": "",
                "parsed": check(list(item["argv"]), bool(item.get("deep"))),
            }
    except SystemExit as exc:
        return {"ok": False, "error": argparse_error(said.getvalue(), exc.code), "parsed": None}
    except Exception as exc:  # the parser's own verdict, reported, not raised
        return {"ok": False, "error": describe(exc), "parsed": None}


if __name__ == "__main__":
    sys.exit(checker_main(sys.argv[1:], verdict, _OUT))
