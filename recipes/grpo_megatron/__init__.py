"""GRPO with Megatron-core on the plan's t/p/c/e layout (the same loop as recipes/grpo)."""
