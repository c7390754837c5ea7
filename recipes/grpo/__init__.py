"""The default recipe: GRPO on the rollout servers the launcher started (DESIGN §9)."""

# What its trainers import first: the launcher checks each is installed before starting them
# (launcher.preflight reads this without importing the package).
REQUIRES = ("torch", "transformers", "safetensors")
