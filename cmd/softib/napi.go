package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/softib/softib/internal/netnsrun"
)

// The kernel's netdev generic netlink family (include/uapi/linux/
// netdev.h): NETDEV_CMD_NAPI_GET lists a netdev's NAPI instances, each
// with the pid of its thread when its NAPI is threaded
// (NETDEV_A_NAPI_PID, Linux 6.8 and later).
const (
	netdevCmdNAPIGet   = 11
	netdevANAPIIfindex = 1
	netdevANAPIPID     = 4
)

// genlHeader is a generic netlink message header (struct genlmsghdr).
// nl.Genlmsg serializes 4 bytes from a 2-byte struct, and the kernel
// refuses the request (EINVAL) when the two it reads past the struct,
// genlmsghdr's reserved field, are not zero.
type genlHeader struct{ cmd, version uint8 }

func (g genlHeader) Len() int          { return nl.SizeofGenlmsg }
func (g genlHeader) Serialize() []byte { return []byte{g.cmd, g.version, 0, 0} }

// napiThreadsOf returns the pids of the NAPI threads of netdev dev in
// namespace ns, as the kernel tells them.
func napiThreadsOf(ns, dev string) ([]int, error) {
	var pids []int
	err := netnsrun.RunNamed(ns, func() error {
		link, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		fam, err := netlink.GenlFamilyGet("netdev")
		if err != nil {
			return fmt.Errorf("netdev netlink family: %w", err)
		}
		req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_DUMP)
		req.AddData(genlHeader{cmd: netdevCmdNAPIGet, version: 1})
		req.AddData(nl.NewRtAttr(netdevANAPIIfindex, nl.Uint32Attr(uint32(link.Attrs().Index))))
		msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
		if err != nil {
			return fmt.Errorf("NAPI_GET: %w", err)
		}
		for _, m := range msgs {
			if len(m) < nl.SizeofGenlmsg {
				continue
			}
			attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
			if err != nil {
				return fmt.Errorf("NAPI_GET reply: %w", err)
			}
			for _, a := range attrs {
				if a.Attr.Type == netdevANAPIPID && len(a.Value) >= 4 {
					pids = append(pids, int(binary.NativeEndian.Uint32(a.Value)))
				}
			}
		}
		return nil
	})
	return pids, err
}

// napiThreads are the kernel's NAPI threads now, by pid, in every
// namespace (their names carry the netdev's name only).
func napiThreads() map[int]bool {
	threads := map[int]bool{}
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, f := range comms {
		b, err := os.ReadFile(f)
		if err != nil || !strings.HasPrefix(string(b), "napi/") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			threads[pid] = true
		}
	}
	return threads
}

// bindNAPI runs start, which gives netdev dev of namespace ns threaded
// NAPI, and binds its NAPI threads to cpus (none: leaves them where they
// are). The kernel names them (napiThreadsOf); one that cannot, before
// Linux 6.8, leaves the threads that appeared meanwhile, which a netdev
// of another namespace made at the same time would be among.
func bindNAPI(cpus []int, ns, dev string, start func()) error {
	if len(cpus) == 0 {
		start()
		return nil
	}
	before := napiThreads()
	start()
	pids, err := napiThreadsOf(ns, dev)
	if err != nil || len(pids) == 0 {
		fmt.Fprintf(os.Stderr, "lab: %s %s: NAPI threads told by when they came (netlink: %d, %v)\n", ns, dev, len(pids), err)
		pids = pids[:0]
		for pid := range napiThreads() {
			if !before[pid] {
				pids = append(pids, pid)
			}
		}
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for _, pid := range pids {
		if err := unix.SchedSetaffinity(pid, &set); err != nil {
			return fmt.Errorf("lab: binding NAPI thread %d of %s %s to CPUs %v: %w", pid, ns, dev, cpus, err)
		}
	}
	return nil
}
