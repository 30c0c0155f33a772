"""Shared helpers for tailweight's real-process tests and benchmarks."""
