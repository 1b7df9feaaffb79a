// Builds jwtcheck: github.com/nats-io/jwt/v2's own decoding and validation of NATS JWTs.
module jetstream-operator.io/devtools/jwtcheck

go 1.25.0

require github.com/nats-io/jwt/v2 v2.8.2

require (
	github.com/nats-io/nkeys v0.4.16 // indirect
	golang.org/x/crypto v0.52.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
