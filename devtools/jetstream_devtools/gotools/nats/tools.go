//go:build tools

// Package tools pins the nats command (the NATS CLI) this module builds.
package tools

import _ "github.com/nats-io/natscli/nats"
