"""What starts a pass besides kopf's own events: one drift watcher per NATS system in use, fed by
JetStream's advisories, resync listings, the consumer sweep, recounts and retries."""
