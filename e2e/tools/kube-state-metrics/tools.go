//go:build tools

// Package tools pins the upstream command this module builds: kube-state-metrics' main
// package is the module root.
package tools

import _ "k8s.io/kube-state-metrics/v2"
