"""Measuring jobs on a real GPU: isolated and co-located runs of zoo models, written as datasets."""
