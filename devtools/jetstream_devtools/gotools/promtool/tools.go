//go:build tools

// Package tools pins promtool (Prometheus's rule checker and unit tester) this module builds.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
