//go:build !amd64

package verbsd

func rdtsc() uint64 { return 0 }

const haveTSC = false
