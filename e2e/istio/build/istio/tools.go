//go:build tools

// Package tools only pins the istiod, pilot-agent and istioctl main packages so `go mod tidy` keeps their
// dependencies.
package tools

import (
	_ "istio.io/istio/istioctl/cmd/istioctl"
	_ "istio.io/istio/pilot/cmd/pilot-agent"
	_ "istio.io/istio/pilot/cmd/pilot-discovery"
)
