// Package contract names what fleet and a console agree on, and holds each of the contract's
// shared rules in one place: the assertion header names and how header names are folded (SPEC
// S3), the console-id grammar, the loopback door's default port, how a Host header is read and
// which Hosts are loopback (C2, S10), when an Origin is a request's own (S12), how a bearer is
// read from Authorization, and what of a request a log line may name (S11).
//
// The supervisor's proxy and the console library both import it, so both judge by the same
// rule. It uses the standard library only, because third-party Go consoles import it through
// package console.
package contract

// DefaultPort is the loopback door's TCP port on 127.0.0.1 (SPEC S1).
const DefaultPort = 7420
