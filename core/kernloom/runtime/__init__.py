"""How a graph runs: placement, partitioning (and, next, rendezvous, executor, session)."""
