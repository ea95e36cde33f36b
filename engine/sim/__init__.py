"""The simulation layer: event loop, ground truth, faults, metrics and checkpoints."""
