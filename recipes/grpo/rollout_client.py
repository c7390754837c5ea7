"""Talking to the rollout servers over HTTP: sample, push new weights, read greedy output.

Stdlib only (urllib + threads): the servers are the launcher's serving processes; what differs
between engines (the weight push, memory release, token ids) is each backend's client
(launcher/backends/<backend>.py), so the same calls work against any of them. A reload that
fails may kill the engine (vLLM's does, reference/vllm-cpu.md), so any error here is final for
the run rather than retried.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from launcher.backends.kinds import serve_backend
from launcher.backends.servers import HttpCall, ServerClient
from launcher.trainer.runtime import DEFAULT_SERVED_MODEL


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


def _call(
    addr: str,
    path: str,
    body: Optional[dict] = None,
    timeout_s: float = 300.0,
    method: str = "POST",
) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://{addr}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise RolloutError(f"{addr}{path}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RolloutError(f"{addr}{path}: {exc}") from None
    return json.loads(raw) if raw.strip() else None


def post_json(addr: str, path: str, body: dict, timeout_s: float = 300.0) -> Any:
    """POST a JSON body to http://addr/path and read the JSON answer (RolloutError on any
    failure): the calls of the run's worker components too (recipes/grpo/workers_client.py)."""
    return _call(addr, path, body, timeout_s)


def _filled(body: Any, values: dict[str, str]) -> Any:
    """The body with the placeholder strings ("{dir}", "{version}") replaced, at any depth."""
    if isinstance(body, dict):
        return {k: _filled(v, values) for k, v in body.items()}
    return values.get(body, body) if isinstance(body, str) else body


def _push(addr: str, call: HttpCall, values: dict[str, str]) -> None:
    """One call of a weight push, its reply checked as the backend says."""
    out = _call(addr, call.path, None if call.body is None else _filled(dict(call.body), values))
    said = out.get("success") if isinstance(out, dict) else None
    if (call.success == "required" and said is not True) or (
        call.success == "not-false" and said is False
    ):
        raise RolloutError(f"{addr}{call.path}: {out}")


@dataclass(frozen=True)
class RolloutServer:
    """One rollout instance: its address and its engine (a serving backend's name)."""

    addr: str
    backend: str = "vllm"
    model: str = DEFAULT_SERVED_MODEL  # --served-model-name ($AREAL_SERVED_MODEL_NAME)

    @property
    def client(self) -> ServerClient:
        return serve_backend(self.backend).client

    def complete(
        self, prompt: str, n: int, max_tokens: int, temperature: float, seed: Optional[int] = None
    ) -> list[dict]:
        """OpenAI /v1/completions choices, with the prompt's and completion's token ids where
        the engine gives them (its client's completion_extra: vLLM)."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if seed is not None:
            body["seed"] = seed
        body.update(self.client.completion_extra)
        return _call(self.addr, "/v1/completions", body)["choices"]

    def greedy(
        self, prompt: str, max_tokens: int
    ) -> tuple[Optional[list[int]], str, Optional[list[float]]]:
        """Token ids and log-probs (None where the server does not say) and text of the
        greedy completion."""
        generate = self.client.generate
        if generate is not None:
            out = _call(
                self.addr,
                generate,
                {
                    "text": prompt,
                    "return_logprob": True,
                    "sampling_params": {"temperature": 0.0, "max_new_tokens": max_tokens},
                },
            )
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
        client = self.client
        values = {"{dir}": weights_dir, "{version}": version}
        if client.pause:
            _call(self.addr, client.pause)
        try:
            for call in client.push:
                _push(self.addr, call, values)
        except RolloutError:
            if client.unpause:
                try:  # leave a live server serving; the reload's error is the one to report
                    _call(self.addr, client.unpause)
                except RolloutError:
                    pass
            raise
        if client.unpause:
            _call(self.addr, client.unpause)

    def release_memory(self) -> None:
        """Free the GPU memory the engine holds (weights, KV cache) while a trainer on the same
        GPUs trains: SGLang's memory saver, vLLM's sleep mode level 1 (weights to host memory,
        KV cache dropped). The server must have been started with it on; the endpoints are the
        backend's own (launcher/backends/<backend>.py, its client)."""
        _call(self.addr, self.client.release, {})

    def resume_memory(self) -> None:
        """Take the memory back (before a weight push or a rollout)."""
        _call(self.addr, self.client.resume, {})

    def weight_version(self) -> Optional[str]:
        """The label of the weights it serves: the version given with the last reload, and
        "default" after a fresh start, on both engines (vLLM /weight_info; SGLang /model_info,
        /get_model_info before 0.5); None for an engine that does not say."""
        paths = self.client.weight_version
        for i, path in enumerate(paths):
            try:
                info = _call(self.addr, path, method="GET")
            except RolloutError:
                if i + 1 < len(paths):
                    continue
                raise
            return (info or {}).get("weight_version")
        return None


def sample_all(
    servers: list[RolloutServer],
    prompts: list[str],
    n: int,
    max_tokens: int,
    temperature: float,
    seed: int,
) -> list[Sample]:
    """n completions per prompt, prompts spread round-robin over every server, concurrently.

    Returned in prompt order, each prompt's n samples together (GRPO groups).
    """

    def one(i: int) -> list[Sample]:
        server = servers[i % len(servers)]
        # vLLM seeds a request's n choices seed, seed+1, ...: keep requests' ranges apart
        choices = sorted(
            server.complete(prompts[i], n, max_tokens, temperature, seed + i * n),
            key=lambda c: c["index"],
        )
        out = []
        for c in choices:
            lp = c.get("logprobs") or {}
            out.append(
                Sample(
                    prompt_index=i,
                    prompt=prompts[i],
                    text=c["text"],
                    prompt_ids=c.get("prompt_token_ids"),
                    completion_ids=c.get("token_ids"),
                    logprobs=lp.get("token_logprobs"),
                    server=server.addr,
                )
            )
        return out

    with ThreadPoolExecutor(max_workers=min(16, len(prompts)) or 1) as pool:
        groups = list(pool.map(one, range(len(prompts))))
    return [s for group in groups for s in group]
