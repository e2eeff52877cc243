package main

import (
	"encoding/json"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softib/softib/vhca/link/cable"
	"github.com/softib/softib/vswitch"
)

// loop is the switch's one goroutine: it takes what the cables received
// into the switch's input buffers, lets each output port send what its
// arbitration picks and its cable has credit for, returns the freed
// buffer to the input cables as credit, and drives the cables' timers.
// It polls while there is work and sleeps in poll on the cables'
// sockets when there is none.
type loop struct {
	name   string
	sw     *vswitch.Switch
	ports  []*cable.Cable // by port number; nil: not cabled
	caps   []*capture     // by port number; nil: not captured
	sends  []func([]byte) // by port number: its cable's Transmit, captured if asked
	rates  []rate         // by port number: its link's rate, if it has one
	start  time.Time
	quit   atomic.Bool
	bell   int // eventfd: stop, status requests
	status chan chan []byte
	fds    []unix.PollFd
}

func newLoop(name string, sw *vswitch.Switch, ports []*cable.Cable, caps []*capture, rates map[int]float64) *loop {
	bell, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	l := &loop{name: name, sw: sw, ports: ports, caps: caps, start: time.Now(), bell: bell, status: make(chan chan []byte, 4)}
	l.sends = make([]func([]byte), len(ports))
	l.rates = make([]rate, len(ports))
	for i, c := range ports {
		if c == nil {
			continue
		}
		if r := rates[i]; r > 0 {
			rt := &l.rates[i]
			rt.perSec, rt.last = r, time.Now()
		}
	}
	for i, c := range ports {
		switch {
		case c == nil:
		case i < len(caps) && caps[i] != nil:
			cp, rt := caps[i], &l.rates[i]
			l.sends[i] = func(pkt []byte) {
				cp.write(pkt)
				rt.spend(len(pkt))
				c.Transmit(pkt)
			}
		default:
			rt := &l.rates[i]
			l.sends[i] = func(pkt []byte) {
				rt.spend(len(pkt))
				c.Transmit(pkt)
			}
		}
	}
	return l
}

func (l *loop) ring() {
	one := [8]byte{1}
	unix.Write(l.bell, one[:])
}

func (l *loop) stop() {
	l.quit.Store(true)
	l.ring()
}

// spin is how long the loop polls after its last work before sleeping:
// short, since on a small host the switch shares the cores with the
// vHCAs and programs it carries traffic for (measured: 50 µs moved more
// than 200 µs through two switches on 2 cores).
const spin = 50 * time.Microsecond

func (l *loop) run() {
	runtime.LockOSThread()
	last := time.Now()
	for !l.quit.Load() {
		if l.step() {
			last = time.Now()
			continue
		}
		if time.Since(last) < spin {
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		l.sleep()
		last = time.Now()
	}
}

// step does one round and reports whether it found work.
func (l *loop) step() bool {
	now := time.Since(l.start)
	work := 0
	for in, c := range l.ports {
		if c == nil {
			continue
		}
		// The switch copies the packet into its input buffer and says
		// (Freed) when the buffer is free again: held until then.
		work += c.Recv(256, func(pkt []byte) bool {
			if in < len(l.caps) && l.caps[in] != nil {
				l.caps[in].write(pkt)
			}
			l.sw.Input(now, in, pkt)
			return false
		})
	}
	l.sw.Expire(now)
	for out, c := range l.ports {
		if c == nil || !l.sw.Pending(out) {
			continue
		}
		if r := &l.rates[out]; r.perSec > 0 {
			// The link's rate, as its width and speed would set it: a
			// packet at a time while the bucket is not in debt.
			for k := 0; k < vswitch.OutputBatch && r.ready(); k++ {
				if l.sw.OutputN(now, out, 1, c.FitsBlocks, l.sends[out]) == 0 {
					break
				}
				work++
			}
			continue
		}
		work += l.sw.Output(now, out, c.FitsBlocks, l.sends[out])
	}
	l.sw.Freed(func(in int, vl uint8, blocks int) {
		if c := l.ports[in]; c != nil {
			c.ReleaseBlocks(vl, blocks)
		}
	})
	for _, c := range l.ports {
		if c != nil {
			c.Flush()
		}
	}
	select {
	case reply := <-l.status:
		reply <- l.snapshot()
	default:
	}
	return work > 0
}

// sleep waits in poll for a cable's datagram, the bell, or the earliest
// cable timer.
func (l *loop) sleep() {
	fds := append(l.fds[:0], unix.PollFd{Fd: int32(l.bell), Events: unix.POLLIN})
	deadline := time.Now().Add(time.Second)
	for i, c := range l.ports {
		if c != nil {
			fds = append(fds, unix.PollFd{Fd: int32(c.FD()), Events: unix.POLLIN})
			if d := c.Deadline(); d.Before(deadline) {
				deadline = d
			}
			// A port held back by its rate goes again when its bucket
			// holds a packet.
			if r := &l.rates[i]; r.perSec > 0 && l.sw.Pending(i) {
				if d := time.Now().Add(time.Duration(max(-r.tokens, 64) / r.perSec * float64(time.Second))); d.Before(deadline) {
					deadline = d
				}
			}
		}
	}
	l.fds = fds
	ts := unix.NsecToTimespec(max(int64(time.Until(deadline)), 0))
	unix.Ppoll(fds, &ts, nil)
	var buf [8]byte
	unix.Read(l.bell, buf[:])
}

// portStatus is a port's state and counters, as -status serves them.
type portStatus struct {
	Port     int                  `json:"port"`
	Phys     string               `json:"phys_state"`
	Logical  string               `json:"state"`
	Counters vswitch.PortCounters `json:"counters"`
	Cable    cable.Stats          `json:"cable"`
}

type switchStatus struct {
	Switch string        `json:"switch"`
	LID    uint16        `json:"lid"`
	Stats  vswitch.Stats `json:"stats"`
	Ports  []portStatus  `json:"ports"`
}

func (l *loop) snapshot() []byte {
	st := switchStatus{Switch: l.name, LID: l.sw.Config().LID, Stats: l.sw.Stats()}
	for n, c := range l.ports {
		if c == nil {
			continue
		}
		p, lg := c.State()
		st.Ports = append(st.Ports, portStatus{Port: n, Phys: p.String(), Logical: lg.String(), Counters: l.sw.Counters(n), Cable: c.Stats()})
	}
	b, _ := json.Marshal(st)
	return b
}

// serveStatus answers each connection to the unix socket at path with
// the switch's status as one JSON object.
func (l *loop) serveStatus(path string) (func(), error) {
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			reply := make(chan []byte, 1)
			l.status <- reply
			l.ring()
			select {
			case b := <-reply:
				conn.Write(append(b, '\n'))
			case <-time.After(2 * time.Second):
			}
			conn.Close()
		}
	}()
	return func() { ln.Close(); os.Remove(path) }, nil
}

// rate is a port's link rate as a token bucket of bytes: a packet may
// go while the bucket is not in debt, and takes its length from it.
type rate struct {
	perSec float64
	tokens float64
	last   time.Time
}

func (r *rate) ready() bool {
	now := time.Now()
	r.tokens = min(r.tokens+now.Sub(r.last).Seconds()*r.perSec, 4352)
	r.last = now
	return r.tokens >= 0
}

func (r *rate) spend(n int) {
	if r.perSec > 0 {
		r.tokens -= float64(n)
	}
}
