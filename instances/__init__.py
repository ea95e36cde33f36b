"""Scheduling instances: the JSON format, cluster shapes, the generator, trace readers and the data folder."""
