// Package link holds the links a vHCA port (or a switch port) sends and
// receives frames through: pipe (in memory, for in-process pairs of
// vHCAs and tests), and, in their own packages, the TAP netdev, the
// AF_XDP fast path and the native IB cable.
//
// A link is driven the way vhca.Device is: the owner of a port pulls
// frames out of the device into the link's transmit buffers while the
// link has room (the link's back pressure reaches the requesters), and
// pushes the frames the link received into the device, in batches.
package link

// Link is one end of a link, as a port's owner drives it.
type Link interface {
	// TxBuf is a buffer to build the next frame in, or nil while the
	// link cannot take one.
	TxBuf() []byte
	// Send sends the first n bytes of the buffer TxBuf returned last.
	Send(n int)
	// Flush pushes out what Send queued (one system call for a batch,
	// where the link makes any).
	Flush()
	// Recv calls fn for each frame received, at most max of them, and
	// returns how many. The frame is valid during the call only. segment
	// is nil but on in-process links, which may carry a segment's payload
	// beside its headers (vhca.Device.TransmitSegment).
	Recv(max int, fn func(frame, segment []byte)) int
}
