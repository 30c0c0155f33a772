//go:build tools

// Package tools only pins Helm's main package so `go mod tidy` keeps its dependencies.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
