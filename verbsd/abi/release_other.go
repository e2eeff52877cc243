//go:build !amd64 || race

package abi

import "sync/atomic"

// storeRelease stores v at p with (at least) release ordering; see
// release_amd64.go.
func storeRelease(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
