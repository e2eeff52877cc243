package vhca

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// ibGID is a link-local IB GID: fe80::/64 and a GUID.
func ibGID(guid uint64) (g wire.GID) {
	g[0], g[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(g[8:], guid)
	return
}

// ibDevice makes a device with one native IB port, LID 0x10+n.
func ibDevice(t testing.TB, n byte, pkeys []uint16) *Device {
	d, err := NewDevice(Config{Name: "ib", NodeGUID: uint64(n), Seed: uint64(n) + 100,
		Ports: []PortConfig{{LinkLayer: LinkLayerInfiniBand, MaxMTU: MTU4096, ActiveMTU: MTU2048, LID: 0x10 + uint16(n),
			GIDs: []GIDEntry{{GID: ibGID(0x1000 + uint64(n)), Type: GIDTypeIB}}, PKeys: pkeys}}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ethDevice makes a device with one Ethernet port whose GID 0 is gid.
func ethDevice(t testing.TB, n byte, gid wire.GID, typ GIDType) *Device {
	d, err := NewDevice(Config{Name: "eth", NodeGUID: uint64(n), Seed: uint64(n) + 200,
		Ports: []PortConfig{{LinkLayer: LinkLayerEthernet, MaxMTU: MTU4096, ActiveMTU: MTU1024,
			MAC: wire.MAC{2, 0, 0, 0, 1, n}, GIDs: []GIDEntry{{GID: gid, Type: typ}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func ibPath(global bool) func(r *endpoint) AV {
	return func(r *endpoint) AV {
		return AV{Port: 1, DLID: r.d.Ports[0].LID, SL: 3, IsGlobal: global,
			GRH: GlobalRoute{DGID: r.d.Ports[0].GIDs[0].GID, HopLimit: 64}}
	}
}

// TestIBNativeRC: an RC connection over native IB ports (LRH, no GRH on a
// local path; LRH and GRH on a global one) carries SEND, WRITE, READ and
// atomics, with the LIDs and SL of the path in every LRH.
func TestIBNativeRC(t *testing.T) {
	for _, global := range []bool{false, true} {
		da, db := ibDevice(t, 1, nil), ibDevice(t, 2, nil)
		a, b := newEndpoint(t, da, QPTypeRC, 1<<16, 1), newEndpoint(t, db, QPTypeRC, 1<<16, 2)
		c := defaultConn()
		c.MTU, c.Path = MTU2048, ibPath(global)
		connectWith(t, a, b, c)
		s := newXSim(t, da, db)
		bad := 0
		s.filter = func(from int, p *wire.Packet) []Time {
			l := p.LRH()
			wantS, wantD := da.Ports[0].LID, db.Ports[0].LID
			if from == 1 {
				wantS, wantD = wantD, wantS
			}
			if l == nil || l.SLID() != wantS || l.DLID() != wantD || l.SL() != 3 || (p.GRH() != nil) != global {
				bad++
			}
			return deliverOnce
		}
		for i := range 1 << 15 {
			a.mem[i] = byte(i*9 + 2)
			b.mem[1<<15+i] = byte(i*5 + 7)
		}
		postRecv(t, b, RecvWR{WRID: 1, SGL: b.sge(0, 8192)})
		postSend(t, a,
			SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: a.sge(0, 5000)},
			SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 7000), RemoteAddr: b.addr(0x4000), RKey: b.mr.Key},
			SendWR{WRID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: a.sge(0x8000, 9000), RemoteAddr: b.addr(1 << 15), RKey: b.mr.Key},
			SendWR{WRID: 4, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: a.sge(0xC000, 8), RemoteAddr: b.addr(0x7000), RKey: b.mr.Key, CompareAdd: 9})
		s.must(1e9, "IB RC", func() bool { return a.scq.Len() >= 4 && b.rcq.Len() >= 1 })
		want := []wcSummary{{1, WCSuccess}, {2, WCSuccess}, {3, WCSuccess}, {4, WCSuccess}}
		if got := summarize(drain(a.scq)); !equalSummaries(got, want) {
			t.Fatalf("global=%v: completions %+v", global, got)
		}
		if rc := drain(b.rcq); len(rc) != 1 || rc[0].Status != WCSuccess || rc[0].ByteLen != 5000 {
			t.Fatalf("global=%v: receive %+v", global, rc)
		}
		if !bytes.Equal(b.mem[:5000], a.mem[:5000]) || !bytes.Equal(b.mem[0x4000:0x4000+7000], a.mem[:7000]) ||
			!bytes.Equal(a.mem[0x8000:0x8000+9000], b.mem[1<<15:1<<15+9000]) || binary.NativeEndian.Uint64(b.mem[0x7000:]) != 9 {
			t.Fatalf("global=%v: data", global)
		}
		if bad != 0 {
			t.Errorf("global=%v: %d packets with a wrong LRH or GRH presence", global, bad)
		}
	}
}

// udRecvOne sends one UD datagram of n bytes from a to b and returns its
// receive completion and buffer (filled with 0xAA before).
func udRecvOne(t *testing.T, a, b *endpoint, av AV, n uint32) (WC, []byte) {
	t.Helper()
	udEndpoint(t, a, 0x11)
	udEndpoint(t, b, 0x11)
	ah, err := a.d.CreateAH(a.pd, av)
	if err != nil {
		t.Fatal(err)
	}
	s := newXSim(t, a.d, b.d)
	buf := b.mem[:40+n+64]
	for i := range buf {
		buf[i] = 0xAA
	}
	for i := range n {
		a.mem[i] = byte(i + 1)
	}
	postRecv(t, b, RecvWR{WRID: 1, SGL: b.sge(0, uint32(len(buf)))})
	postSend(t, a, SendWR{WRID: 1, Opcode: WRSend, SGL: a.sge(0, n), AH: ah, RemoteQPN: b.qp.Num, RemoteQKey: 0x11})
	s.must(1e9, "datagram", func() bool { return b.rcq.Len() > 0 })
	rc := drain(b.rcq)
	if len(rc) != 1 || rc[0].Status != WCSuccess || rc[0].ByteLen != 40+n || rc[0].SrcQP != a.qp.Num {
		t.Fatalf("completion %+v", rc)
	}
	if !bytes.Equal(buf[40:40+n], a.mem[:n]) {
		t.Fatal("datagram payload")
	}
	for i := 40 + n; i < uint32(len(buf)); i++ {
		if buf[i] != 0xAA {
			t.Fatalf("byte %d past the datagram written", i)
		}
	}
	return rc[0], buf
}

// TestUDGRHArea: what the 40 bytes before a UD datagram hold, by link:
// native IB without GRH: nothing (the area untouched, no WCWithGRH), the
// sender's LID and SL in the completion; IB with GRH and RoCEv1: the GRH;
// RoCEv2/IPv6: the IPv6 header.
func TestUDGRHArea(t *testing.T) {
	t.Run("IB local", func(t *testing.T) {
		da, db := ibDevice(t, 1, nil), ibDevice(t, 2, nil)
		a, b := newEndpoint(t, da, QPTypeUD, 4096, 1), newEndpoint(t, db, QPTypeUD, 4096, 2)
		wc, buf := udRecvOne(t, a, b, ibPath(false)(b), 100)
		if wc.Flags&WCWithGRH != 0 || wc.SLID != da.Ports[0].LID || wc.SL != 3 {
			t.Fatalf("completion %+v: want no GRH, SLID %d, SL 3", wc, da.Ports[0].LID)
		}
		if !bytes.Equal(buf[:40], bytes.Repeat([]byte{0xAA}, 40)) {
			t.Fatalf("GRH area written without a GRH: % x", buf[:40])
		}
	})
	t.Run("IB global", func(t *testing.T) {
		da, db := ibDevice(t, 1, nil), ibDevice(t, 2, nil)
		a, b := newEndpoint(t, da, QPTypeUD, 4096, 1), newEndpoint(t, db, QPTypeUD, 4096, 2)
		wc, buf := udRecvOne(t, a, b, ibPath(true)(b), 100)
		g := wire.GRH(buf[:40])
		if wc.Flags&WCWithGRH == 0 || wc.SLID != da.Ports[0].LID || g.IPVer() != 6 || g.SGID() != da.Ports[0].GIDs[0].GID || g.DGID() != db.Ports[0].GIDs[0].GID || g.NxtHdr() != 0x1B {
			t.Fatalf("completion %+v, GRH area % x", wc, buf[:40])
		}
	})
	t.Run("RoCEv2 IPv6", func(t *testing.T) {
		ga := wire.GID{0x20, 0x01, 0x0d, 0xb8, 15: 1}
		gb := wire.GID{0x20, 0x01, 0x0d, 0xb8, 15: 2}
		da, db := ethDevice(t, 1, ga, GIDTypeRoCEv2), ethDevice(t, 2, gb, GIDTypeRoCEv2)
		a, b := newEndpoint(t, da, QPTypeUD, 4096, 1), newEndpoint(t, db, QPTypeUD, 4096, 2)
		wc, buf := udRecvOne(t, a, b, AV{Port: 1, IsGlobal: true, DMAC: db.Ports[0].MAC, GRH: GlobalRoute{DGID: gb, HopLimit: 64}}, 100)
		ip := wire.IPv6(buf[:40])
		if wc.Flags&WCWithGRH == 0 || ip.Version() != 6 || ip.NextHeader() != 17 || ip.Src() != [16]byte(ga) || ip.Dst() != [16]byte(gb) {
			t.Fatalf("completion %+v, GRH area % x", wc, buf[:40])
		}
	})
	t.Run("RoCEv1", func(t *testing.T) {
		ga, gb := ibGID(0xA1), ibGID(0xB2)
		da, db := ethDevice(t, 1, ga, GIDTypeRoCEv1), ethDevice(t, 2, gb, GIDTypeRoCEv1)
		a, b := newEndpoint(t, da, QPTypeUD, 4096, 1), newEndpoint(t, db, QPTypeUD, 4096, 2)
		wc, buf := udRecvOne(t, a, b, AV{Port: 1, IsGlobal: true, DMAC: db.Ports[0].MAC, GRH: GlobalRoute{DGID: gb, HopLimit: 64}}, 100)
		g := wire.GRH(buf[:40])
		if wc.Flags&WCWithGRH == 0 || g.IPVer() != 6 || g.SGID() != ga || g.DGID() != gb || g.NxtHdr() != 0x1B {
			t.Fatalf("completion %+v, GRH area % x", wc, buf[:40])
		}
	})
}

// TestPKeyCheck: a request whose P_Key does not match the receiving QP's
// partition (IBA 1.4 §10.9.3: same 15-bit key, at least one full member)
// is dropped without a trace but the port's counter: no NAK, no
// completion; the requester only times out.
func TestPKeyCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pa, pb uint16
		ok     bool
	}{
		{"full-full", 0x8001, 0x8001, true},
		{"limited-full", 0x0001, 0x8001, true},
		{"full-limited", 0x8001, 0x0001, true},
		{"limited-limited", 0x0001, 0x0001, false},
		{"other partition", 0x8002, 0x8001, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			da, db := ibDevice(t, 1, []uint16{0xFFFF, tc.pa}), ibDevice(t, 2, []uint16{0xFFFF, tc.pb})
			a, b := newEndpoint(t, da, QPTypeRC, 4096, 1), newEndpoint(t, db, QPTypeRC, 4096, 2)
			c := defaultConn()
			c.MTU, c.Path, c.PKeyIndexA, c.PKeyIndexB = MTU2048, ibPath(false), 1, 1
			c.Timeout, c.RetryCnt = 10, 1
			connectWith(t, a, b, c)
			s := newXSim(t, da, db)
			postSend(t, a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: a.sge(0, 10), RemoteAddr: b.addr(0), RKey: b.mr.Key})
			s.must(1e9, "WRITE", func() bool { return a.scq.Len() > 0 })
			wc := drain(a.scq)
			drops := db.Ports[0].Counters.RcvPKeyDrops
			if tc.ok {
				if wc[0].Status != WCSuccess || drops != 0 {
					t.Fatalf("completion %+v, %d P_Key drops", wc, drops)
				}
				return
			}
			if wc[0].Status != WCRetryExcErr || drops != 2 || len(s.sentBy(1)) != 0 || b.rcq.Len() != 0 {
				t.Fatalf("completion %+v, %d P_Key drops, %d responses; want RETRY_EXC_ERR, 2 drops, none", wc, drops, len(s.sentBy(1)))
			}
		})
	}
}
