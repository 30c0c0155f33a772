//go:build tools

// Package tools only pins the kube-controller-manager main package so `go mod tidy` keeps its dependencies.
package tools

import _ "k8s.io/kubernetes/cmd/kube-controller-manager"
