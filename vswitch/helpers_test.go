package vswitch

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/softib/softib/vhca/wire"
)

// pkt describes a test packet: a UD SEND ONLY, or a raw LRH-only packet
// when raw is set.
type pkt struct {
	VL, SL     uint8
	DLID, SLID uint16
	Payload    int    // bytes
	PSN        uint32 // tags the packet
	GRH        bool
	SGID, DGID wire.GID
	HopLimit   uint8
}

// build makes the packet p describes with real ICRC and VCRC.
func build(tb testing.TB, p pkt) []byte {
	tb.Helper()
	h := wire.Headers{
		Encap: wire.EncapIB, VL: p.VL, SL: p.SL, DLID: p.DLID, SLID: p.SLID,
		GRH: p.GRH, SGID: p.SGID, DGID: p.DGID, HopLimit: p.HopLimit,
		Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQP: 0x12, PSN: p.PSN,
		QKey: 0x11111111, SrcQP: 0x34,
	}
	payload := make([]byte, p.Payload)
	for i := range payload {
		payload[i] = byte(i*7 + int(p.PSN))
	}
	buf := make([]byte, MaxPacketLen+64)
	var w wire.Packet
	if err := wire.Build(buf, &h, payload, &w); err != nil {
		tb.Fatal(err)
	}
	return buf[:w.Len():w.Len()]
}

// parse checks a packet with wire.ParseIB (VCRC and ICRC) and returns it.
func parse(tb testing.TB, b []byte) *wire.Packet {
	tb.Helper()
	var p wire.Packet
	if err := wire.ParseIB(b, &p); err != nil {
		tb.Fatalf("ParseIB: %v", err)
	}
	return &p
}

func psnOf(b []byte) uint32 {
	off := wire.LRHLen
	if wire.LRH(b).LNH() == wire.LNHGlobal {
		off += wire.GRHLen
	}
	return wire.BTH(b[off:]).PSN()
}

func newSwitch(tb testing.TB, c Config) *Switch {
	tb.Helper()
	s, err := New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func input(tb testing.TB, s *Switch, now time.Duration, in int, b []byte) {
	tb.Helper()
	must(tb, s.Input(now, in, b))
}

func always(uint8, int) bool { return true }

// drain sends everything out of port out with credit always given and
// returns copies of the packets.
func drain(s *Switch, now time.Duration, out int) [][]byte {
	var got [][]byte
	for s.Output(now, out, always, func(b []byte) { got = append(got, append([]byte(nil), b...)) }) > 0 {
	}
	return got
}

// freed collects Freed per (port, VL).
func freed(s *Switch) map[[2]int]int {
	m := map[[2]int]int{}
	s.Freed(func(in int, vl uint8, blocks int) { m[[2]int{in, int(vl)}] += blocks })
	return m
}

func vcrcOK(b []byte) bool {
	n := len(b) - wire.VCRCLen
	return wire.VCRC(b[:n]) == binary.LittleEndian.Uint16(b[n:])
}
