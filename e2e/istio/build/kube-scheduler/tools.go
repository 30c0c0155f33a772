//go:build tools

// Package tools only pins the kube-scheduler main package so `go mod tidy` keeps its dependencies.
package tools

import _ "k8s.io/kubernetes/cmd/kube-scheduler"
