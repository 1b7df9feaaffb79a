//go:build tools

// Package tools pins the commands this module builds, so `go mod tidy` keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
