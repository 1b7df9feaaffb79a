"""NATS I/O: connections and the JetStream API. Nothing here decides anything."""
