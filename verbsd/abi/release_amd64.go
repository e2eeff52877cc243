//go:build amd64 && !race

package abi

// storeRelease stores v at p with release ordering only: the stores
// before it are visible to the other side before it is. sync/atomic's
// Store is sequentially consistent, an XCHG on x86-64, which waits until
// every earlier store (the ring's entries, whose cache lines the other
// core holds) has reached the cache: a cache line's trip between cores
// that the producer need not wait for. Under the race detector the
// fallback (release_other.go) is used, whose atomic store the detector
// sees as the synchronisation it is.
//
//go:noescape
func storeRelease(p *uint32, v uint32)
