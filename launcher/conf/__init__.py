"""Hydra config files (found as package data when installed)."""
