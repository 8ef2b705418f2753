"""Graphs: nodes, symbolic tensors, the TF-1-style builder and GraphDef JSON."""
