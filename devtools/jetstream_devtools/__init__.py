"""A real local environment (etcd, kube-apiserver, nats-server) for tests, benchmarks and `dev up`.

Everything runs the real binaries on loopback, so what passes here is what a cluster would do.
A distribution of its own (jetstream-devtools), so the operator's package and image carry
neither it nor the `kubernetes` client it uses.
"""
