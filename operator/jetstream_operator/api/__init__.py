"""Custom resource models: the single source of truth for the CRDs in `crds/`."""
