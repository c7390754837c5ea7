"""The default recipe: GRPO on the rollout servers the launcher started
(docs/architecture.md §9)."""

# What its trainers import first: the launcher checks each is installed before starting them
# (launcher.node.preflight reads this without importing the package).
REQUIRES = ("torch", "transformers", "safetensors")
