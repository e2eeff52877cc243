package verbsd

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/softib/softib/verbsd/abi"
	"github.com/softib/softib/vhca"
	"golang.org/x/sys/unix"
)

// The verbs as the control socket carries them. Each runs on the engine
// goroutine, takes the request's body and descriptors (which it owns:
// it closes them or hands them on), and answers.

func (s *session) verb(e *engine, op abi.Op, body []byte, fds []int) (r reply) {
	defer func() {
		if r.err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}()
	if s.h == nil && op != abi.OpOpenDevice && op != abi.OpListDevices {
		return reply{err: refuse(unix.EINVAL, "%s before OpenDevice", op)}
	}
	if len(fds) > 0 && op != abi.OpRegMR && op != abi.OpCreateCompChannel {
		return reply{err: refuse(unix.EINVAL, "%s takes no file descriptor", op)}
	}
	switch op {
	case abi.OpListDevices, abi.OpQueryDevice, abi.OpAllocPD, abi.OpCreateCompChannel:
		if len(body) != 0 {
			return reply{err: refuse(unix.EINVAL, "%s takes no body, got %d bytes", op, len(body))}
		}
	}
	switch op {
	case abi.OpListDevices:
		var list []abi.DeviceEntry
		for _, h := range e.hcas {
			list = append(list, abi.DeviceEntry{Name: abi.SetName(h.name), NodeGUID: h.dev.Attr.NodeGUID})
		}
		return reply{body: list}
	case abi.OpOpenDevice:
		var m abi.OpenDevice
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		if s.h != nil {
			return reply{err: refuse(unix.EBUSY, "a connection opens one device")}
		}
		for _, h := range e.hcas {
			if h.name == m.Name.String() {
				s.h = h
				return reply{body: abi.OpenDeviceReply{Ports: uint32(len(h.dev.Ports))}}
			}
		}
		return reply{err: refuse(unix.ENODEV, "no device %q", m.Name.String())}
	case abi.OpQueryDevice:
		a := s.h.dev.QueryDevice()
		return reply{body: abi.FromDeviceAttr(&a)}
	case abi.OpQueryPort:
		var q abi.PortQuery
		if err := abi.Decode(body, &q); err != nil {
			return reply{err: err}
		}
		a, err := s.h.dev.QueryPort(uint8(min(q.Port, 255)))
		if err != nil {
			return reply{err: err}
		}
		p := abi.PortAttr{State: uint8(a.State), MaxMTU: uint8(a.MaxMTU), ActiveMTU: uint8(a.ActiveMTU),
			LinkLayer: uint8(a.LinkLayer), LMC: a.LMC, GIDTblLen: uint32(a.GIDTblLen),
			PKeyTblLen: uint32(a.PKeyTblLen), LID: a.LID, SMLID: a.SMLID, MaxMsgSize: a.MaxMsgSize, MAC: s.h.mac}
		p.Paths, p.Path, p.Netdev = s.h.paths()
		return reply{body: p}
	case abi.OpQueryGID:
		var q abi.PortQuery
		if err := abi.Decode(body, &q); err != nil {
			return reply{err: err}
		}
		g, err := s.h.dev.QueryGID(uint8(min(q.Port, 255)), int(min(q.Index, 1<<20)))
		if err != nil {
			return reply{err: err}
		}
		return reply{body: abi.GIDEntry{GID: g.GID, Type: uint32(g.Type)}}
	case abi.OpQueryPKey:
		var q abi.PortQuery
		if err := abi.Decode(body, &q); err != nil {
			return reply{err: err}
		}
		k, err := s.h.dev.QueryPKey(uint8(min(q.Port, 255)), int(min(q.Index, 1<<20)))
		if err != nil {
			return reply{err: err}
		}
		return reply{body: abi.PKey{PKey: uint32(k)}}
	case abi.OpQueryCounters:
		var q abi.PortQuery
		if err := abi.Decode(body, &q); err != nil {
			return reply{err: err}
		}
		p := s.h.dev.Port(uint8(min(q.Port, 255)))
		if p == nil {
			return reply{err: refuse(unix.EINVAL, "no port %d", q.Port)}
		}
		return reply{body: countersOf(&p.Counters)}
	case abi.OpAllocPD:
		if len(s.pds) >= s.srv.limits.PDs {
			return reply{err: limit("PDs", s.srv.limits.PDs)}
		}
		pd, err := s.h.dev.AllocPD()
		if err != nil {
			return reply{err: err}
		}
		h := s.handle()
		s.pds[h] = pd
		return reply{body: abi.Handle{Handle: h}}
	case abi.OpDeallocPD:
		return s.destroy(body, func(h uint32) error {
			pd := s.pds[h]
			if pd == nil {
				return noObject("PD", h)
			}
			if err := s.h.dev.DeallocPD(pd); err != nil {
				return err
			}
			delete(s.pds, h)
			return nil
		})
	case abi.OpRegMR:
		return s.regMR(body, fds)
	case abi.OpDeregMR:
		return s.destroy(body, func(h uint32) error {
			m := s.mrs[h]
			if m == nil {
				return noObject("MR", h)
			}
			if err := s.h.dev.DeregMR(m.mr); err != nil {
				return err
			}
			s.mapped -= m.bytes
			delete(s.mrs, h)
			return nil
		})
	case abi.OpCreateCompChannel:
		if len(fds) != 1 {
			return reply{err: refuse(unix.EINVAL, "CreateCompChannel carries one eventfd")}
		}
		if len(s.chans) >= s.srv.limits.CQs {
			return reply{err: limit("completion channels", s.srv.limits.CQs)}
		}
		h := s.handle()
		s.chans[h] = &compChannel{handle: h, fd: fds[0]}
		return reply{body: abi.Handle{Handle: h}}
	case abi.OpDestroyCompChannel:
		return s.destroy(body, func(h uint32) error {
			ch := s.chans[h]
			if ch == nil {
				return noObject("completion channel", h)
			}
			if ch.users > 0 {
				return refuse(unix.EBUSY, "completion channel %d still has %d CQs", h, ch.users)
			}
			unix.Close(ch.fd)
			delete(s.chans, h)
			return nil
		})
	case abi.OpCreateCQ:
		return s.createCQ(e, body)
	case abi.OpDestroyCQ:
		return s.destroy(body, func(h uint32) error {
			c := s.cqs[h]
			if c == nil {
				return noObject("CQ", h)
			}
			if err := s.dropCQ(e, c); err != nil {
				return err
			}
			delete(s.cqs, h)
			return nil
		})
	case abi.OpCreateSRQ:
		return s.createSRQ(e, body)
	case abi.OpModifySRQ:
		var m abi.ModifySRQ
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		r := s.srqs[m.Handle]
		if r == nil {
			return reply{err: noObject("SRQ", m.Handle)}
		}
		return reply{err: s.h.dev.ModifySRQ(r.srq, int(min(m.Limit, 1<<30)))}
	case abi.OpQuerySRQ:
		var m abi.Handle
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		r := s.srqs[m.Handle]
		if r == nil {
			return reply{err: noObject("SRQ", m.Handle)}
		}
		a := r.srq.Attr()
		return reply{body: abi.CreateSRQ{MaxWR: uint32(a.MaxWR), MaxSGE: uint32(a.MaxSGE), Limit: uint32(a.Limit)}}
	case abi.OpDestroySRQ:
		return s.destroy(body, func(h uint32) error {
			r := s.srqs[h]
			if r == nil {
				return noObject("SRQ", h)
			}
			if err := s.dropSRQ(e, r); err != nil {
				return err
			}
			delete(s.srqs, h)
			return nil
		})
	case abi.OpCreateQP:
		return s.createQP(e, body)
	case abi.OpModifyQP:
		var m abi.ModifyQP
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		r := s.qps[m.Handle]
		if r == nil {
			return reply{err: noObject("QP", m.Handle)}
		}
		attr := m.Attr.VHCA()
		mask := vhca.QPAttrMask(m.Mask)
		if mask&vhca.QPAttrAV != 0 {
			mac, err := s.h.resolveMAC(attr.AV.GRH.DGID)
			if err != nil {
				return reply{err: unreachable(err)}
			}
			attr.AV.DMAC = mac
			s.h.kernelHopLimit(&attr.AV)
		}
		return reply{err: s.h.dev.ModifyQP(r.qp, &attr, mask)}
	case abi.OpQueryQP:
		var m abi.Handle
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		r := s.qps[m.Handle]
		if r == nil {
			return reply{err: noObject("QP", m.Handle)}
		}
		attr, init := s.h.dev.QueryQP(r.qp)
		return reply{body: abi.QueryQPReply{Attr: abi.FromQPAttr(&attr), Type: uint32(init.Type), SigAll: boolU32(init.SigAll)}}
	case abi.OpDestroyQP:
		return s.destroy(body, func(h uint32) error {
			r := s.qps[h]
			if r == nil {
				return noObject("QP", h)
			}
			if err := s.dropQP(e, r); err != nil {
				return err
			}
			delete(s.qps, h)
			return nil
		})
	case abi.OpAttachMcast, abi.OpDetachMcast:
		var m abi.Mcast
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		r := s.qps[m.QP]
		if r == nil {
			return reply{err: noObject("QP", m.QP)}
		}
		if op == abi.OpAttachMcast {
			return reply{err: s.h.dev.AttachMcast(r.qp, m.GID, m.LID)}
		}
		return reply{err: s.h.dev.DetachMcast(r.qp, m.GID, m.LID)}
	case abi.OpCreateAH:
		var m abi.CreateAH
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		pd := s.pds[m.PD]
		if pd == nil {
			return reply{err: noObject("PD", m.PD)}
		}
		if len(s.ahs) >= s.srv.limits.AHs {
			return reply{err: limit("AHs", s.srv.limits.AHs)}
		}
		av := m.AV.VHCA()
		mac, err := s.h.resolveMAC(av.GRH.DGID)
		if err != nil {
			return reply{err: unreachable(err)}
		}
		av.DMAC = mac
		s.h.kernelHopLimit(&av)
		ah, err := s.h.dev.CreateAH(pd, av)
		if err != nil {
			return reply{err: err}
		}
		h := s.handle()
		s.ahs[h] = ah
		return reply{body: abi.Handle{Handle: h}}
	case abi.OpDestroyAH:
		return s.destroy(body, func(h uint32) error {
			ah := s.ahs[h]
			if ah == nil {
				return noObject("AH", h)
			}
			if err := s.h.dev.DestroyAH(ah); err != nil {
				return err
			}
			delete(s.ahs, h)
			return nil
		})
	case abi.OpAddAddr, abi.OpDelAddr:
		var m abi.Addr
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		if err := s.portAdmin("changing addresses", m.Port); err != nil {
			return reply{err: err}
		}
		if s.h.nd != nil {
			return reply{err: refuse(unix.EPERM, "%s is attached to %s: its addresses are the netdev's (ip addr add/del ... dev %s)", s.h.name, s.h.nd.Name(), s.h.nd.Name())}
		}
		if op == abi.OpDelAddr {
			s.h.delAddr(netip.AddrFrom16(m.IP).Unmap())
			return reply{}
		}
		i, err := s.h.addAddr(netip.AddrFrom16(m.IP).Unmap())
		if err != nil {
			return reply{err: err}
		}
		return reply{body: abi.Handle{Handle: uint32(i)}}
	case abi.OpSetPath:
		var m abi.SetPath
		if err := abi.Decode(body, &m); err != nil {
			return reply{err: err}
		}
		if err := s.portAdmin("choosing a port's path", m.Port); err != nil {
			return reply{err: err}
		}
		paths, _, _ := s.h.paths()
		if m.Path != abi.PathTAP && m.Path != abi.PathXDP || paths&uint8(m.Path) == 0 {
			return reply{err: refuse(unix.EINVAL, "%s has no path %d (it has %s)", s.h.name, m.Path, pathNames(paths))}
		}
		if s.h.fast != nil {
			if err := s.h.fast.setOn(m.Path == abi.PathXDP); err != nil {
				return reply{err: err}
			}
		}
		return reply{}
	}
	return reply{err: refuse(unix.EOPNOTSUPP, "unknown operation %d", op)}
}

// portAdmin checks a request that changes a port for every client of the
// device: root or verbsd's own user only, and a port that exists.
func (s *session) portAdmin(what string, port uint32) error {
	if s.uid != 0 && int(s.uid) != os.Getuid() {
		return refuse(unix.EPERM, "%s takes root or verbsd's user", what)
	}
	if port != 1 {
		return refuse(unix.EINVAL, "no port %d", port)
	}
	return nil
}

func (s *session) destroy(body []byte, f func(uint32) error) reply {
	var m abi.Handle
	if err := abi.Decode(body, &m); err != nil {
		return reply{err: err}
	}
	return reply{err: f(m.Handle)}
}

func noObject(what string, h uint32) error {
	return refuse(unix.EINVAL, "no %s with handle %d on this connection", what, h)
}

func limit(what string, n int) error {
	return refuse(unix.ENOMEM, "per-client limit of %d %s reached (verbsd's limits)", n, what)
}

func (s *session) regMR(body []byte, fds []int) reply {
	var m abi.RegMR
	if err := abi.Decode(body, &m); err != nil {
		return reply{err: err}
	}
	if len(fds) != 1 {
		return reply{err: refuse(unix.EINVAL, "RegMR carries one memfd")}
	}
	fd := fds[0]
	defer unix.Close(fd) // the mapping, if made, outlives it
	pd := s.pds[m.PD]
	if pd == nil {
		return reply{err: noObject("PD", m.PD)}
	}
	if len(s.mrs) >= s.srv.limits.MRs {
		return reply{err: limit("MRs", s.srv.limits.MRs)}
	}
	if s.mapped+m.Length > s.srv.limits.MappedBytes || s.mapped+m.Length < s.mapped {
		return reply{err: refuse(unix.ENOMEM, "per-client limit of %d registered bytes reached", s.srv.limits.MappedBytes)}
	}
	mem, err := mapClientMemory(fd, m.Offset, m.Length)
	if err != nil {
		return reply{err: refuse(unix.EINVAL, "RegMR: %v", err)}
	}
	mr, err := s.h.dev.RegMR(pd, mem, m.IOVA, vhca.Access(m.Access))
	if err != nil {
		mem.Release()
		return reply{err: err}
	}
	h := s.handle()
	s.mrs[h] = &mrObj{mr: mr, bytes: m.Length}
	s.mapped += m.Length
	return reply{body: abi.RegMRReply{Handle: h, LKey: mr.LKey(), RKey: mr.RKey()}}
}

// ringEntries is the ring size for a queue of n entries.
func ringEntries(n int) int {
	e := 1
	for e < n {
		e <<= 1
	}
	return e
}

func (s *session) createCQ(e *engine, body []byte) reply {
	var m abi.CreateCQ
	if err := abi.Decode(body, &m); err != nil {
		return reply{err: err}
	}
	if len(s.cqs) >= s.srv.limits.CQs {
		return reply{err: limit("CQs", s.srv.limits.CQs)}
	}
	var ch *compChannel
	if m.Channel != 0 {
		if ch = s.chans[m.Channel]; ch == nil {
			return reply{err: noObject("completion channel", m.Channel)}
		}
	}
	max := s.h.dev.Attr.MaxCQE
	if m.CQE < 1 || int64(m.CQE) > int64(max) {
		return reply{err: refuse(unix.EINVAL, "CQ of %d entries (1..%d)", m.CQE, max)}
	}
	entries := ringEntries(int(m.CQE))
	cq, err := s.h.dev.CreateCQ(min(entries, max))
	if err != nil {
		return reply{err: err}
	}
	mem, fd, err := newSharedMemory("softib-cq", abi.RingSize(entries, abi.CQESize))
	if err != nil {
		s.h.dev.DestroyCQ(cq)
		return reply{err: err}
	}
	ring, _ := abi.NewRing(mem.b, abi.KindCQ, entries, abi.CQESize)
	h := s.handle()
	c := &cqRing{s: s, handle: h, cq: cq, mem: mem, ring: ring, ch: ch}
	if ch != nil {
		ch.users++
	}
	s.cqs[h] = c
	s.h.addCQ(c, e.rounds)
	e.cqOf[cq] = c
	cq.Ring = c
	return reply{body: abi.CreateCQReply{Handle: h, CQE: uint32(cq.Cap()), RingBytes: uint64(len(mem.b))},
		fds: []int{fd}}
}

func (s *session) createSRQ(e *engine, body []byte) reply {
	var m abi.CreateSRQ
	if err := abi.Decode(body, &m); err != nil {
		return reply{err: err}
	}
	pd := s.pds[m.PD]
	if pd == nil {
		return reply{err: noObject("PD", m.PD)}
	}
	if len(s.srqs) >= s.srv.limits.SRQs {
		return reply{err: limit("SRQs", s.srv.limits.SRQs)}
	}
	attr := vhca.SRQAttr{MaxWR: clampInt(m.MaxWR), MaxSGE: clampInt(m.MaxSGE), Limit: clampInt(m.Limit)}
	srq, err := s.h.dev.CreateSRQ(pd, attr)
	if err != nil {
		return reply{err: err}
	}
	entries, size := ringEntries(attr.MaxWR), abi.RecvWQESize(attr.MaxSGE)
	mem, fd, err := newSharedMemory("softib-srq", abi.RingSize(entries, size))
	if err != nil {
		s.h.dev.DestroySRQ(srq)
		return reply{err: err}
	}
	ring, _ := abi.NewRing(mem.b, abi.KindSRQ, entries, size)
	h := s.handle()
	r := &srqRing{s: s, handle: h, srq: srq, mem: mem, ring: ring, maxSGE: attr.MaxSGE}
	s.srqs[h] = r
	s.h.srqs = append(s.h.srqs, r)
	e.srqOf[srq] = r
	return reply{body: abi.CreateSRQReply{Handle: h, MaxWR: uint32(attr.MaxWR), MaxSGE: uint32(attr.MaxSGE),
		RingBytes: uint64(len(mem.b))}, fds: []int{fd}}
}

func clampInt(v uint32) int { return int(min(v, 1<<30)) }

func (s *session) createQP(e *engine, body []byte) reply {
	var m abi.CreateQP
	if err := abi.Decode(body, &m); err != nil {
		return reply{err: err}
	}
	pd := s.pds[m.PD]
	if pd == nil {
		return reply{err: noObject("PD", m.PD)}
	}
	scq, rcq := s.cqs[m.SendCQ], s.cqs[m.RecvCQ]
	if scq == nil || rcq == nil {
		return reply{err: refuse(unix.EINVAL, "QP needs a send and a receive CQ of this connection")}
	}
	var srq *srqRing
	if m.SRQ != 0 {
		if srq = s.srqs[m.SRQ]; srq == nil {
			return reply{err: noObject("SRQ", m.SRQ)}
		}
	}
	if len(s.qps) >= s.srv.limits.QPs {
		return reply{err: limit("QPs", s.srv.limits.QPs)}
	}
	init := vhca.QPInitAttr{Type: vhca.QPType(m.Type), SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: m.Cap.VHCA(), SigAll: m.SigAll != 0}
	if srq != nil {
		init.SRQ = srq.srq
		init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = 0, 0
	}
	qp, err := s.h.dev.CreateQP(pd, init)
	if err != nil {
		return reply{err: err}
	}
	c := init.Cap
	sqEntries, sqSize := ringEntries(c.MaxSendWR), abi.SendWQESize(c.MaxSendSGE, c.MaxInlineData)
	rqEntries, rqSize, rqBytes := 0, 0, 0
	if srq == nil {
		rqEntries, rqSize = ringEntries(c.MaxRecvWR), abi.RecvWQESize(c.MaxRecvSGE)
		rqBytes = abi.RingSize(rqEntries, rqSize)
	}
	sqOff, rqOff, total := qpLayout(qp.Num, abi.RingSize(sqEntries, sqSize), rqBytes)
	if sqSize > abi.MaxRingEntrySz || rqSize > abi.MaxRingEntrySz {
		s.h.dev.DestroyQP(qp)
		return reply{err: refuse(unix.EINVAL, "QP work queue entries too large")}
	}
	mem, fd, err := newSharedMemory(fmt.Sprintf("softib-qp%d", qp.Num), total)
	if err != nil {
		s.h.dev.DestroyQP(qp)
		return reply{err: err}
	}
	r := &qpRings{s: s, qp: qp, mem: mem, cap: c}
	r.sq, _ = abi.NewRing(mem.b[sqOff:], abi.KindSQ, sqEntries, sqSize)
	if srq == nil {
		r.rq, _ = abi.NewRing(mem.b[rqOff:], abi.KindRQ, rqEntries, rqSize)
	}
	h := s.handle()
	r.handle = h
	s.qps[h] = r
	s.h.addQP(r, e.rounds)
	e.qpOf[qp] = r
	return reply{body: abi.CreateQPReply{Handle: h, QPN: qp.Num, Cap: abi.FromCap(&c), SQOffset: uint64(sqOff), RQOffset: uint64(rqOff),
		MapBytes: uint64(len(mem.b))}, fds: []int{fd}}
}

func countersOf(c *vhca.PortCounters) abi.Counters {
	var malformed uint64
	for _, n := range c.RcvMalformed {
		malformed += n
	}
	return abi.Counters{
		XmitPackets: c.XmitPackets, XmitBytes: c.XmitBytes, RcvPackets: c.RcvPackets, RcvBytes: c.RcvBytes,
		Malformed: malformed, PKeyDrops: c.RcvPKeyDrops, QKeyDrops: c.RcvQKeyDrops, NoQP: c.RcvNoQP,
		AddrDrops: c.RcvAddrDrops, BadOpcode: c.RcvBadOpcode, PSNDrops: c.RcvPSNDrops,
		Retransmits: c.Retransmits, RNRNAKsSent: c.RNRNAKsSent, RNRNAKsRcvd: c.RNRNAKsRcvd,
		NAKsSent: c.NAKsSent, NAKsRcvd: c.NAKsRcvd, Timeouts: c.Timeouts,
	}
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// unreachable is the refusal of an address vector verbsd cannot resolve;
// errResolving passes as it is, for the caller to try again.
func unreachable(err error) error {
	if errors.Is(err, errResolving) {
		return err
	}
	return refuse(unix.EHOSTUNREACH, "%v", err)
}

// kernelHopLimit does to a RoCE AV what the kernel's ib_core does on
// ibv_modify_qp and ibv_create_ah (ib_resolve_unicast_gid_dmac): a
// unicast destination reached through the IP stack gets the route's hop
// limit, 64 (the default IPv4 TTL and IPv6 hop limit), whatever the
// program asked (ibv_rc_pingpong asks 1, perftest 0xFF); rxe sends TTL
// 64 for both. Multicast destinations, link-local ones from a RoCEv1
// GID and InfiniBand ports keep the program's.
func (h *hca) kernelHopLimit(av *vhca.AV) {
	if h.cable != nil || !av.IsGlobal {
		return
	}
	d := av.GRH.DGID
	if netip.AddrFrom16(d).Unmap().IsMulticast() {
		return
	}
	if g := h.dev.Ports[0].GIDs; d[0] == 0xFE && d[1]&0xC0 == 0x80 &&
		int(av.GRH.SGIDIndex) < len(g) && g[av.GRH.SGIDIndex].Type == vhca.GIDTypeRoCEv1 {
		return
	}
	av.GRH.HopLimit = 64
}
