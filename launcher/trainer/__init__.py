"""What a trainer process imports: its plan, checkpoints, progress, objective, tracking."""
