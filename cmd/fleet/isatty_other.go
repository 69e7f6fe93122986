//go:build !linux

package main

import "io"

// isTerminal is false off Linux: the start-up line is JSON unless --log-format text asks.
func isTerminal(io.Writer) bool { return false }
