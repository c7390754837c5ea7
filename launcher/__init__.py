"""areal-launch: resolve RL engine backends into a GPU plan, then start and supervise it.

The package root imports nothing heavy: the launcher builds command lines, it never imports
torch, vllm or sglang.
"""

__version__ = "0.1.0"
