//go:build !linux

package main

import "errors"

func evloop(args []string) error { return errors.New("evloop: Linux only") }
