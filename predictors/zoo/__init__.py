"""Model zoo: operator graphs of training models, shipped as JSON (reading them needs no torch).

``load_graph(model, dataset)`` returns a networkx graph of operators with per-sample costs;
``zoo_models()`` lists the models with shipped graphs. Extraction (``zoo.extract``, torch on the
meta device) rebuilds the files: ``dltsched predict build-graphs``. ``zoo.memory`` reads the shipped
memory traces of each model's training step (``memory_trace.json``, written by ``zoo.memtrace``).
"""

from dltsched.predictors.zoo.graphs import FORMAT_VERSION, graph_record, load_graph, zoo_models

__all__ = ["FORMAT_VERSION", "graph_record", "load_graph", "zoo_models"]
