"""Packaged Label Studio label-config templates (package data)."""
