"""Declarations: what ops, kernels and devices are. Nothing here runs a graph."""
