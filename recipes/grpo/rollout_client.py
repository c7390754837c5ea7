"""Talking to the rollout servers over HTTP: sample, push new weights, read greedy output.

Stdlib only (urllib + threads): the servers are the launcher's vLLM or SGLang processes and
the same calls work against either. vLLM needs VLLM_SERVER_DEV_MODE=1 for its weight-update
endpoints; a reload that fails kills vLLM's engine (reference/vllm-cpu.md), so any error here is
final for the run rather than retried.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from launcher.spec import registry
from launcher.worker.runtime import DEFAULT_SERVED_MODEL


class RolloutError(RuntimeError):
    """A server refused or failed a request; the message names the server and the call."""


@dataclass(frozen=True)
class Sample:
    """One completion: token ids as the server saw them (when it says), its text and log-probs."""

    prompt_index: int
    prompt: str
    text: str
    prompt_ids: Optional[list[int]]
    completion_ids: Optional[list[int]]
    logprobs: Optional[list[float]]
    server: str


def _call(addr: str, path: str, body: Optional[dict] = None, timeout_s: float = 300.0,
          method: str = "POST") -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{addr}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise RolloutError(f"{addr}{path}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RolloutError(f"{addr}{path}: {exc}") from None
    return json.loads(raw) if raw.strip() else None


@dataclass(frozen=True)
class RolloutServer:
    """One rollout instance: its address and its engine ("vllm" or "sglang")."""

    addr: str
    backend: str = "vllm"
    model: str = DEFAULT_SERVED_MODEL  # --served-model-name ($AREAL_SERVED_MODEL_NAME)

    def complete(self, prompt: str, n: int, max_tokens: int, temperature: float,
                 seed: Optional[int] = None) -> list[dict]:
        """OpenAI /v1/completions choices; vLLM adds the prompt's and completion's token ids."""
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "n": n,
                                "max_tokens": max_tokens, "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if self.backend == "vllm":
            body.update(return_token_ids=True, logprobs=0)
        return _call(self.addr, "/v1/completions", body)["choices"]

    def greedy(self, prompt: str, max_tokens: int
               ) -> tuple[Optional[list[int]], str, Optional[list[float]]]:
        """Token ids and log-probs (None where the server does not say) and text of the
        greedy completion."""
        if self.backend == "sglang":
            out = _call(self.addr, "/generate", {"text": prompt, "return_logprob": True,
                                                 "sampling_params": {"temperature": 0.0,
                                                                     "max_new_tokens": max_tokens}})
            rows = (out.get("meta_info") or {}).get("output_token_logprobs")
            return out.get("output_ids"), out["text"], [r[0] for r in rows] if rows else None
        choice = self.complete(prompt, 1, max_tokens, 0.0)[0]
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        return choice.get("token_ids"), choice["text"], logprobs

    def reload(self, weights_dir: str, version: str) -> None:
        """Make the server serve the weights in `weights_dir`; raises if it did not."""
        if not os.path.isfile(os.path.join(weights_dir, "config.json")):
            # vLLM's engine dies on a bad path: never ask it to load one
            raise RolloutError(f"{weights_dir}: no config.json, refusing to push it")
        if self.backend == "sglang":
            out = _call(self.addr, "/update_weights_from_disk",
                        {"model_path": weights_dir, "weight_version": version})
            if not (out or {}).get("success", False):
                raise RolloutError(f"{self.addr}/update_weights_from_disk: {out}")
            return
        # wait: in-flight requests finish on the old weights; pause also empties the prefix
        # cache, and the explicit reset below keeps that true where pause stops doing it
        _call(self.addr, "/pause?mode=wait")
        try:
            _call(self.addr, "/collective_rpc",
                  {"method": "reload_weights", "kwargs": {"weights_path": weights_dir}})
            _call(self.addr, "/update_weight_version", {"new_version": version})
            reset = _call(self.addr, "/reset_prefix_cache")
            if isinstance(reset, dict) and reset.get("success") is False:
                raise RolloutError(f"{self.addr}/reset_prefix_cache: {reset}")
        except RolloutError:
            try:  # leave a live server serving; the reload's error is the one to report
                _call(self.addr, "/resume")
            except RolloutError:
                pass
            raise
        _call(self.addr, "/resume")

    def release_memory(self) -> None:
        """Free the GPU memory the engine holds (weights, KV cache) while a trainer on the same
        GPUs trains: SGLang's memory saver, vLLM's sleep mode level 1 (weights to host memory,
        KV cache dropped). The server must have been started with it on; the endpoints are the
        backend's own (launcher/backends/<backend>.py CLIENT)."""
        _call(self.addr, registry.backend(self.backend).CLIENT.release, {})

    def resume_memory(self) -> None:
        """Take the memory back (before a weight push or a rollout)."""
        _call(self.addr, registry.backend(self.backend).CLIENT.resume, {})

    def weight_version(self) -> Optional[str]:
        """The label of the weights it serves: the version given with the last reload, and
        "default" after a fresh start, on both engines (vLLM /weight_info; SGLang /model_info,
        /get_model_info before 0.5); None for an engine that does not say."""
        if self.backend == "sglang":
            try:
                info = _call(self.addr, "/model_info", method="GET")
            except RolloutError:
                info = _call(self.addr, "/get_model_info", method="GET")
            return (info or {}).get("weight_version")
        if self.backend != "vllm":
            return None
        return (_call(self.addr, "/weight_info", method="GET") or {}).get("weight_version")


def sample_all(servers: list[RolloutServer], prompts: list[str], n: int, max_tokens: int,
               temperature: float, seed: int) -> list[Sample]:
    """n completions per prompt, prompts spread round-robin over every server, concurrently.

    Returned in prompt order, each prompt's n samples together (GRPO groups).
    """
    def one(i: int) -> list[Sample]:
        server = servers[i % len(servers)]
        # vLLM seeds a request's n choices seed, seed+1, ...: keep requests' ranges apart
        choices = sorted(server.complete(prompts[i], n, max_tokens, temperature, seed + i * n),
                         key=lambda c: c["index"])
        out = []
        for c in choices:
            lp = c.get("logprobs") or {}
            out.append(Sample(prompt_index=i, prompt=prompts[i], text=c["text"],
                              prompt_ids=c.get("prompt_token_ids"),
                              completion_ids=c.get("token_ids"),
                              logprobs=lp.get("token_logprobs"), server=server.addr))
        return out

    with ThreadPoolExecutor(max_workers=min(16, len(prompts)) or 1) as pool:
        groups = list(pool.map(one, range(len(prompts))))
    return [s for group in groups for s in group]
