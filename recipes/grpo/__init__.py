"""The default recipe: GRPO on the rollout servers the launcher started (DESIGN §9)."""
