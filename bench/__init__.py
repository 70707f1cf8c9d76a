"""Benchmarks of the project, one package per component (`python -m bench.<component>`)."""
