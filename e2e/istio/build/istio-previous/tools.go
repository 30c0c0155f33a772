//go:build tools

// Package tools only pins the previous istiod and pilot-agent main packages so `go mod tidy` keeps their
// dependencies.
package tools

import (
	_ "istio.io/istio/pilot/cmd/pilot-agent"
	_ "istio.io/istio/pilot/cmd/pilot-discovery"
)
