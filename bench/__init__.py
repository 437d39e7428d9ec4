"""Benchmarks: the project's workflows measured against hand-written temporalio baselines."""
