"""Benchmark harness: heterogeneous backends (tailweight-emulator), N client Envoys each driven by
its own Fortio, one policy after another; results.json, results.md and PNG plots. See docs/scenario.md."""
