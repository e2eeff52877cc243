package verbsd

// rdtsc reads the time stamp counter.
func rdtsc() uint64

const haveTSC = true
