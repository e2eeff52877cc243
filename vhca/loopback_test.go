package vhca

import (
	"bytes"
	"testing"
)

// TestReceiveOwn: a device's frames to itself (two QPs of one vHCA)
// delivered from the view the device built them with (ReceiveOwn) do
// what the same frames parsed again (ReceiveSegment) do: the same
// completions, the same memory, the same port counters. On an
// in-process port (segments, unsealed frames) and on a port whose frames
// leave the process (sealed, with ICRC).
func TestReceiveOwn(t *testing.T) {
	for _, inProcess := range []bool{true, false} {
		type outcome struct {
			wcs      []WC
			mem      []byte
			counters PortCounters
		}
		var runs [2]outcome
		for mode, own := range []bool{false, true} {
			d := testDevice(t, 1)
			if inProcess {
				d = inProcessDevice(t, 1)
			}
			x, y := newEndpoint(t, d, QPTypeRC, 1<<18, 1), newEndpoint(t, d, QPTypeRC, 1<<18, 1)
			connect(t, x, y, 100, 0xFFFFF0, MTU1024) // y's PSNs wrap
			for i := range x.mem {
				x.mem[i] = byte(i * 13)
			}
			for _, n := range []uint32{8, 5000} {
				if _, err := d.PostRecv(y.qp, []RecvWR{{WRID: uint64(n), SGL: []SGE{{Addr: 0x10000 + 0x20000, Length: n, LKey: y.mr.Key}}}}); err != nil {
					t.Fatal(err)
				}
			}
			sge := func(off, n uint32) []SGE { return []SGE{{Addr: 0x10000 + uint64(off), Length: n, LKey: x.mr.Key}} }
			wrs := []SendWR{
				{WRID: 1, Opcode: WRSend, SGL: sge(0, 8)},
				{WRID: 2, Opcode: WRSend, SGL: sge(100, 5000)},
				{WRID: 3, Opcode: WRRDMAWrite, SGL: sge(0, 65536), RemoteAddr: 0x10000, RKey: y.mr.Key},
				{WRID: 4, Opcode: WRRDMARead, SGL: sge(0x30000, 65536), RemoteAddr: 0x10000 + 0x100, RKey: y.mr.Key},
				// Away from what the READ before them reads: a READ's
				// data is read as its responses go, and with no fence
				// the requests after it may land before or after that,
				// as the frames' turns fall.
				{WRID: 5, Opcode: WRAtomicFetchAdd, SGL: sge(0x38000, 8), RemoteAddr: 0x28000, RKey: y.mr.Key, CompareAdd: 5},
				{WRID: 6, Opcode: WRRDMAWriteWithImm, SGL: sge(7, 3), RemoteAddr: 0x29000, RKey: y.mr.Key, Imm: 0xABCD},
			}
			for i := range wrs {
				wrs[i].Flags = SendSignaled
			}
			if _, err := d.PostRecv(y.qp, []RecvWR{{WRID: 99}}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.PostSend(x.qp, wrs); err != nil {
				t.Fatal(err)
			}
			turnAround(t, d, own, 10000)
			var o outcome
			wcs := make([]WC, 16)
			for _, cq := range []*CQ{x.scq, y.rcq} {
				n := cq.Poll(wcs)
				o.wcs = append(o.wcs, wcs[:n]...)
			}
			if len(o.wcs) != len(wrs)+3 {
				t.Fatalf("inProcess %v, ReceiveOwn %v: %d completions, want %d: %+v", inProcess, own, len(o.wcs), len(wrs)+3, o.wcs)
			}
			for _, wc := range o.wcs {
				if wc.Status != WCSuccess {
					t.Fatalf("inProcess %v, ReceiveOwn %v: %+v", inProcess, own, wc)
				}
			}
			o.mem = append(bytes.Clone(x.mem), y.mem...)
			o.counters = d.Ports[0].Counters
			runs[mode] = o
		}
		if len(runs[0].wcs) != len(runs[1].wcs) {
			t.Fatalf("inProcess %v: %d completions parsed, %d from ReceiveOwn", inProcess, len(runs[0].wcs), len(runs[1].wcs))
		}
		for i := range runs[0].wcs {
			if runs[0].wcs[i] != runs[1].wcs[i] {
				t.Errorf("inProcess %v: completion %d parsed %+v, from ReceiveOwn %+v", inProcess, i, runs[0].wcs[i], runs[1].wcs[i])
			}
		}
		if !bytes.Equal(runs[0].mem, runs[1].mem) {
			t.Errorf("inProcess %v: memory differs", inProcess)
		}
		if runs[0].counters != runs[1].counters {
			t.Errorf("inProcess %v: counters parsed %+v, from ReceiveOwn %+v", inProcess, runs[0].counters, runs[1].counters)
		}
		if c := runs[1].counters; c.RcvPackets != c.XmitPackets || c.RcvPackets < 60 {
			t.Errorf("inProcess %v: %d packets sent, %d received", inProcess, c.XmitPackets, c.RcvPackets)
		}
	}
}

// turnAround sends the device's frames to itself until it has none, as a
// link turns around frames to its own address: each taken from the view
// it was built with (ReceiveOwn) if own, else parsed again
// (ReceiveSegment). It returns how many frames went, failing the test
// past most.
func turnAround(t testing.TB, d *Device, own bool, most int) int {
	buf := make([]byte, 16384)
	for frames := 0; ; frames++ {
		n, seg, port := d.TransmitSegment(1, buf)
		if n == 0 {
			return frames
		}
		if frames == most {
			t.Fatalf("no end after %d frames", most)
		}
		if own {
			d.ReceiveOwn(1, port)
		} else {
			d.ReceiveSegment(1, port, buf[:n], seg)
		}
	}
}
