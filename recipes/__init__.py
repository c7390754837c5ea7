"""Runnable trainer entry points (torchrun workers); see recipes/grpo for the default RL loop."""
