package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/verbsd"
	"github.com/softib/softib/verbsd/verbsdtest"
	"github.com/softib/softib/vhca"
)

// A ring of four switches, a vHCA on each, all-to-all UD traffic: the
// classic credit loop. Switch i's port 1 goes clockwise to switch i+1,
// port 2 counter-clockwise, port 3 to host i; every route goes clockwise
// (a unidirectional ring), so the clockwise links depend on each other
// in a circle. On one VL the ring fills up and stops for good (no lifetime
// discards: nothing gives). With a dateline — the flows that cross the
// link from switch 3 to switch 0 sent on SL1, which the SL-to-VL tables
// map to VL1 — no VL's dependencies close the circle, and every datagram
// arrives.
func TestRingDeadlock(t *testing.T) {
	for _, dateline := range []bool{false, true} {
		t.Run(map[bool]string{false: "one VL", true: "dateline"}[dateline], func(t *testing.T) {
			ringTraffic(t, dateline)
		})
	}
}

func ringTraffic(t *testing.T, dateline bool) {
	// Cable ends: for switch i, [4i] clockwise out, [4i+1] host side of
	// its host cable, [4i+2] its host port; ring cable i joins switch i
	// port 1 ([4i]) and switch i+1 port 2 ([4i+3]).
	ad := addrs(t, 16)
	cw := func(i int) string { return ad[4*i] }
	ccw := func(i int) string { return ad[4*((i+1)%4)+3] } // switch i+1's port 2 end of ring cable i
	var devs []verbsd.DeviceConfig
	var loops []*loop
	for i := range 4 {
		var lft strings.Builder
		for j := range 4 {
			port := []int{3, 1, 1, 1}[(j-i+4)%4]
			fmt.Fprintf(&lft, "lft %d %d\n", 10+j, port)
		}
		if dateline {
			// SL1 on VL1 out of the dateline (switch 3's port 1) and
			// after it (switches 0 and 1, in from the ring); on VL0
			// before it (injected at 0, 1, 2; passing switch 2).
			vl := func(v int) string { return fmt.Sprintf("0,%d,0,0,0,0,0,0,0,0,0,0,0,0,0,0", v) }
			fmt.Fprintf(&lft, "sl2vl 3 1 %s\n", vl(map[bool]int{true: 1}[i == 3]))
			fmt.Fprintf(&lft, "sl2vl 2 1 %s\n", vl(map[bool]int{true: 1}[i != 2]))
		}
		loops = append(loops, startSwitch(t, fmt.Sprintf("switch s%d lid=%d ports=3 vls=2 buffer=80\n"+
			"port 1 local=%s peer=%s\nport 2 local=%s peer=%s\nport 3 local=%s peer=%s\n%s",
			i, i+1, cw(i), ccw(i), ccw((i+3)%4), cw((i+3)%4), ad[4*i+2], ad[4*i+1], lft.String())))
		devs = append(devs, verbsd.DeviceConfig{Name: fmt.Sprintf("h%d", i),
			Cable: &verbsd.CableConfig{Local: ad[4*i+1], Peer: ad[4*i+2], LID: uint16(10 + i), VLs: 2, BufferBlocks: 80}})
	}
	_, sock := verbsdtest.Start(t, verbsd.Config{Devices: devs})
	type host struct {
		ctx *client.Context
		qp  *client.QP
		cq  *client.CQ
		mr  *client.MR
		ahs [4]*client.AH
	}
	var hosts [4]*host
	for i := range 4 {
		ctx, err := client.Open(fmt.Sprintf("h%d", i), &client.Options{Socket: sock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close() })
		h := &host{ctx: ctx}
		pd, _ := ctx.AllocPD()
		h.cq, _ = ctx.CreateCQ(256, nil)
		buf, _ := ctx.Alloc(4096)
		h.mr, _ = pd.RegMR(buf.B, vhca.AccessLocalWrite)
		if h.qp, err = pd.CreateQP(client.QPInitAttr{Type: vhca.QPTypeUD, SendCQ: h.cq, RecvCQ: h.cq,
			Cap: client.QPCap{MaxSendWR: 128, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := h.qp.Connect(client.Path{QKey: 1}); err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			if j == i {
				continue
			}
			// The flows whose route crosses the dateline (the clockwise
			// link from switch 3 to switch 0) go on SL1: VL1.
			sl := uint8(0)
			if dateline && crosses(i, j) {
				sl = 1
			}
			if h.ahs[j], err = pd.CreateAH(client.AV{Port: 1, DLID: uint16(10 + j), SL: sl}); err != nil {
				t.Fatal(err)
			}
		}
		hosts[i] = h
	}
	received := func() (n uint64) {
		for _, h := range hosts {
			c, _ := h.ctx.QueryCounters(1)
			n += c.RcvPackets
		}
		return n
	}
	// Every host floods the three others, round robin, 2 KiB datagrams.
	stop := make(chan struct{})
	done := make(chan [2]int, 4)
	for i, h := range hosts {
		go func() {
			posted, completed, next := 0, 0, 0
			var wc [64]client.WC
			for {
				select {
				case <-stop:
					done <- [2]int{posted, completed}
					return
				default:
				}
				for posted-completed < 128 {
					j := next % 4
					next++
					if j == i {
						continue
					}
					if _, err := h.qp.PostSend([]client.SendWR{{Opcode: vhca.WRSend, Flags: vhca.SendSignaled, AH: h.ahs[j], RemoteQPN: 1, RemoteQKey: 1,
						SGL: []client.SGE{{Addr: h.mr.Addr, Length: 2048, LKey: h.mr.LKey}}}}); err != nil {
						break
					}
					posted++
				}
				n, _ := h.cq.Poll(wc[:])
				completed += n
				if n == 0 {
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
	}
	ringWait := func() (w [4]uint64) {
		for i, l := range loops {
			for _, p := range l.counters(t).Ports {
				if p.Port == 1 {
					w[i] = p.Counters.PortXmitWait
				}
			}
		}
		return w
	}
	time.Sleep(time.Second)
	before, waitBefore := received(), ringWait()
	time.Sleep(500 * time.Millisecond)
	after, waitAfter := received(), ringWait()
	close(stop)
	var posted, completed int
	for range 4 {
		r := <-done
		posted, completed = posted+r[0], completed+r[1]
	}
	t.Logf("received %d datagrams in the first second, %d in the next half (posted %d, completed %d)", before, after-before, posted, completed)
	if !dateline {
		if after != before {
			t.Fatalf("the one-VL ring moved %d datagrams in half a second after filling: no deadlock", after-before)
		}
		if before == 0 {
			t.Fatal("nothing ever moved: not a deadlock of full buffers but a fabric that never worked")
		}
		// Every ring link has packets for it and no credit: the buffers
		// downstream are full.
		for i := range 4 {
			if waitAfter[i] <= waitBefore[i] {
				t.Errorf("switch %d's ring port does not wait for credit (XmitWait %d then %d): not stuck on full buffers", i, waitBefore[i], waitAfter[i])
			}
		}
		return
	}
	if after-before < 100 {
		t.Fatalf("the ring with a dateline moved only %d datagrams in half a second", after-before)
	}
	// Everything posted arrives.
	for deadline := time.Now().Add(10 * time.Second); received() < uint64(posted) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if got := received(); got != uint64(posted) {
		for _, l := range loops {
			st := l.counters(t)
			for _, p := range st.Ports {
				t.Logf("%s/%d %s/%s: %+v\n   cable %+v", st.Switch, p.Port, p.Phys, p.Logical, p.Counters, p.Cable)
			}
		}
		for i, h := range hosts {
			c, _ := h.ctx.QueryCounters(1)
			t.Logf("h%d: %+v", i, c)
		}
		t.Fatalf("with the dateline %d datagrams posted, %d arrived", posted, got)
	}
}

// crosses reports whether host i's route to host j (clockwise) uses the
// link from switch 3 to switch 0.
func crosses(i, j int) bool {
	for s := i; s != j; s = (s + 1) % 4 {
		if s == 3 {
			return true
		}
	}
	return false
}
