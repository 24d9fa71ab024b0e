"""Cluster backends behind one interface: `base.ClusterBackend`.

`base` holds the protocol, the value types and the errors (plain Python); `kubernetes` is the
real-cluster backend (the only importer of the Kubernetes client) with its pure manifest
builders in `kubernetes_manifests`. Importing this package imports neither client nor Django.
"""
