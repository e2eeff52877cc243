package vswitch

// outPort is the output side of a port: the input queues whose head
// packet waits for it, one list per output VL (index 15 for VL15), and its
// VL arbiter.
type outPort struct {
	lists     [16]list
	ready     uint16 // VLs whose list is not empty
	high, low arbTable
	highLimit uint8
	highSent  int // high-priority bytes sent while the low table waited
}

// list is a FIFO of queues, linked through Switch.nodes.
type list struct{ head, tail int32 }

type node struct {
	prev, next int32
	vl         int8 // the list the node is in; -1 if none
}

// arbTable is one VL arbitration table (§7.6.9) and its position.
type arbTable struct {
	e      [maxArbEntries]arbEntry
	n      int
	vls    uint16 // the VLs of its entries with a non-zero weight
	idx    int    // current entry
	inTurn bool   // the current entry's turn has begun (its weight was added)
}

type arbEntry struct {
	vl     uint8
	weight uint8
	bal    int32 // bytes the entry may still send; negative: its overdraft
}

func (t *arbTable) set(es []VLArbEntry, vls int) {
	*t = arbTable{n: len(es)}
	for i, e := range es {
		t.e[i] = arbEntry{vl: e.VL, weight: e.Weight}
		if e.Weight != 0 && int(e.VL) < vls {
			t.vls |= 1 << e.VL
		}
	}
}

func (t *arbTable) advance() {
	t.idx++
	if t.idx == t.n {
		t.idx = 0
	}
	t.inTurn = false
}

// pick returns the entry to send the next packet from, given the VLs
// ready (something to send and not refused credit). It must be called only
// when t.vls&ready != 0.
func (t *arbTable) pick(ready uint16) int {
	for {
		for range t.n {
			e := &t.e[t.idx]
			if e.weight != 0 && ready&(1<<e.vl) != 0 {
				if !t.inTurn {
					e.bal += int32(e.weight) * BlockSize
					t.inTurn = true
				}
				if e.bal > 0 {
					return t.idx
				}
			} else if e.bal > 0 {
				e.bal = 0 // skipped: no surplus kept, the overdraft stays
			}
			t.advance()
		}
		// A whole round in which every ready entry was still paying off
		// an overdraft: skip the rounds it takes the first of them to be
		// out of debt, rather than looping through them.
		skip := int32(-1)
		for i := range t.n {
			e := &t.e[i]
			if e.weight != 0 && ready&(1<<e.vl) != 0 {
				k := -e.bal / (int32(e.weight) * BlockSize) // rounds still in debt after the next
				if skip < 0 || k < skip {
					skip = k
				}
			}
		}
		for i := range t.n {
			e := &t.e[i]
			if e.weight != 0 && ready&(1<<e.vl) != 0 {
				e.bal += skip * int32(e.weight) * BlockSize
			}
		}
	}
}

// charge accounts a packet of n bytes sent by entry i.
func (t *arbTable) charge(i, n int) {
	t.e[i].bal -= int32(n)
}
