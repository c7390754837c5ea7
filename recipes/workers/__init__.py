"""Example worker components the project ships: RLinf's `env` and `reward` as small HTTP
services (launcher/planning/components.py SHIPPED starts them when no entry is given)."""
