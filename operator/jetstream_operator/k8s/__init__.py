"""Kubernetes I/O outside kopf: installing CRDs and other direct API calls."""
