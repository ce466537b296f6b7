"""Alembic migrations of the item store (package data; alembic runs env.py)."""
