"""Helpers for testing and measuring logkeel from outside: real broker processes."""
