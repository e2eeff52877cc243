package vhca

// Memory is the storage behind a memory region, as the vHCA reads and
// writes it: its DMA is a copy into or out of Bytes. verbsd maps a
// client's memfd; tests use a SliceMemory.
type Memory interface {
	Bytes() []byte
	// Release is called once, when the region is deregistered; the vHCA
	// never touches Bytes again after it.
	Release()
}

// SliceMemory is Memory over a plain slice.
type SliceMemory []byte

func (m SliceMemory) Bytes() []byte { return m }
func (m SliceMemory) Release()      {}
