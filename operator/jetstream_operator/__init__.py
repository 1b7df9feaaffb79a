"""A Kubernetes operator that manages NATS JetStream streams and consumers as custom resources."""

GROUP = "jetstream-operator.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
