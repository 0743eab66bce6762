"""Delayed operations (work in progress)."""
