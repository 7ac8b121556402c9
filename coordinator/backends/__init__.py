"""Cluster backends: ``sim`` (virtual time, fluid CPU sharing) and ``live`` (gRPC to node agents)."""
