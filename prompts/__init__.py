"""Packaged Jinja2 prompt templates (package data)."""
