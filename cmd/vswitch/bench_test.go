package main

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/mmsg"
	"github.com/softib/softib/vhca/link/cable"
	"github.com/softib/softib/vhca/wire"
)

// The switch's forwarding rate per core over cables, beside a plain UDP
// relay (recvmmsg → sendmmsg, 64 a call) on the same path: a sender
// cable, the relay or the switch, a receiving cable, all on loopback, each
// on a goroutine of its own. Both report forwarded packets a second; the
// ratio is what counts (run both in one go test invocation):
//
//	go test -run '^$' -bench 'Forward' -benchtime 300000x ./cmd/vswitch

// udPacket is a UD SEND of payload bytes from LID 10 to LID 12.
func udPacket(payload int) []byte {
	buf := make([]byte, 4352)
	h := wire.Headers{Encap: wire.EncapIB, DLID: 12, SLID: 10, Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQP: 1, QKey: 1, SrcQP: 1}
	var p wire.Packet
	if err := wire.Build(buf, &h, make([]byte, payload), &p); err != nil {
		panic(err)
	}
	return buf[:p.Len()]
}

// forward runs the sender and the receiver around a forwarder (started
// by start with the two addresses it listens on and the two it talks to)
// and returns packets a second.
func forward(b *testing.B, start func(in, inPeer, out, outPeer string) func()) {
	ad := addrsB(b, 4) // sender, forwarder in, forwarder out, receiver
	stopFwd := start(ad[1], ad[0], ad[2], ad[3])
	defer stopFwd()
	tx, err := cable.Open(cable.Config{Name: "tx", Local: ad[0], Peer: ad[1], BufferBlocks: 2048})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rx, err := cable.Open(cable.Config{Name: "rx", Local: ad[3], Peer: ad[2], BufferBlocks: 2048})
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	pkt := udPacket(64)
	got := make(chan int, 1)
	stop := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				got <- n
				return
			default:
			}
			k := rx.Recv(256, func([]byte) bool { n++; return true })
			rx.Flush()
			if k == 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}()
	for !tx.Fits(0, len(pkt)) {
		tx.Recv(256, func([]byte) bool { return true })
		tx.Flush()
		time.Sleep(100 * time.Microsecond)
	}
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		for sent < b.N {
			buf := tx.TxBuf()
			if buf == nil {
				break
			}
			tx.Send(copy(buf, pkt))
			sent++
		}
		tx.Flush()
		tx.Recv(256, func([]byte) bool { return true })
	}
	// What waits for credit goes too; then until the receiver has them
	// all (or they stop coming).
	for deadline := time.Now().Add(2 * time.Second); tx.Waiting() > 0 && time.Now().Before(deadline); {
		tx.Flush()
		tx.Recv(256, func([]byte) bool { return true })
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	n := <-got
	el := b.Elapsed() - 200*time.Millisecond
	b.ReportMetric(float64(n)/el.Seconds(), "pkts/s")
	b.ReportMetric(float64(b.N-n), "lost")
	if n < b.N {
		b.Logf("lost %d: sender %+v, receiver %+v", b.N-n, tx.Stats(), rx.Stats())
	}
}

func BenchmarkForwardSwitch(b *testing.B) {
	forward(b, func(in, inPeer, out, outPeer string) func() {
		startSwitch(b, fmt.Sprintf("switch s1 lid=1 ports=2 buffer=2048\nport 1 local=%s peer=%s\nport 2 local=%s peer=%s\nlft 12 2\nlft 10 1\n", in, inPeer, out, outPeer))
		return func() {}
	})
}

// BenchmarkForwardUDPRelay is the yardstick: datagrams taken in batches
// from one socket and sent in batches out of another, nothing looked at.
// It grants no credits, so the sender's cable has no flow control to
// wait for: it is told it may send (as if the relay granted all).
func BenchmarkForwardUDPRelay(b *testing.B) {
	forward(b, func(in, inPeer, out, outPeer string) func() {
		done := make(chan struct{})
		stop := make(chan struct{})
		cin := dialUDP(b, in, inPeer)
		cout := dialUDP(b, out, outPeer)
		rin, _ := cin.SyscallConn()
		rout, _ := cout.SyscallConn()
		go func() {
			defer close(done)
			hs, bufs, _ := mmsg.New(64, 4352, false)
			outs := make([]mmsg.Hdr, 64)
			iovs := make([]unix.Iovec, 64)
			credit := cable.NewEndpoint(1, 2048, true)
			var fc [wire.FlowControlLen]byte
			for {
				select {
				case <-stop:
					return
				default:
				}
				var n int
				var errno unix.Errno
				rin.Read(func(fd uintptr) bool {
					n, errno = mmsg.RecvNow(fd, hs)
					return true
				})
				if errno != 0 || n == 0 {
					// The sender's link must come up and see credit: the
					// relay answers link packets as a cable end would.
					credit.LinkPackets(time.Duration(time.Now().UnixNano()), func(op, vl uint8, fctbs, fccl uint16) {
						cin.Write(wire.BuildFlowControl(fc[:], op, vl, fctbs, fccl))
					})
					time.Sleep(10 * time.Microsecond)
					continue
				}
				k := 0
				for i := range n {
					p := bufs[i][:hs[i].Len]
					if len(p) == wire.FlowControlLen {
						if f, err := wire.CheckFlowControl(p); err == nil {
							credit.LinkPacket(time.Duration(time.Now().UnixNano()), f)
						}
						continue
					}
					credit.Received(time.Duration(time.Now().UnixNano()), 0, len(p))
					credit.Release(0, len(p))
					iovs[k].Base = &p[0]
					iovs[k].SetLen(len(p))
					outs[k].Hdr.Iov = &iovs[k]
					outs[k].Hdr.SetIovlen(1)
					k++
				}
				credit.LinkPackets(time.Duration(time.Now().UnixNano()), func(op, vl uint8, fctbs, fccl uint16) {
					cin.Write(wire.BuildFlowControl(fc[:], op, vl, fctbs, fccl))
				})
				for off := 0; off < k; {
					var m int
					rout.Write(func(fd uintptr) bool {
						m, errno = mmsg.SendNow(fd, outs[off:k])
						return errno != unix.EAGAIN
					})
					if errno != 0 || m == 0 {
						break
					}
					off += m
				}
			}
		}()
		// The receiver's cable end must hear a link partner too.
		go func() {
			var fc [wire.FlowControlLen]byte
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
					cout.Write(wire.BuildFlowControl(fc[:], wire.FlowControlInit, 0, 0, 0))
				}
			}
		}()
		return func() { close(stop); <-done; cin.Close(); cout.Close() }
	})
}

func dialUDP(b *testing.B, local, peer string) *net.UDPConn {
	la, _ := net.ResolveUDPAddr("udp", local)
	pa, _ := net.ResolveUDPAddr("udp", peer)
	c, err := net.DialUDP("udp", la, pa)
	if err != nil {
		b.Fatal(err)
	}
	rc, _ := c.SyscallConn()
	rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	})
	return c
}

func addrsB(b *testing.B, n int) []string {
	var out []string
	for range n {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, c.LocalAddr().String())
		defer c.Close()
	}
	return out
}
