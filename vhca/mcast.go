package vhca

import (
	"net/netip"
	"slices"

	"github.com/softib/softib/vhca/wire"
)

// UD multicast on native InfiniBand (IBA 1.4 §10.5; ibv_attach_mcast,
// ibv_detach_mcast). A group is named by its MGID; the SM gives it an MLID
// (0xC000..0xFFFE) and routes that MLID through the switches' MFTs to
// every member port. A packet to a group carries the MLID as its DLID and
// 0xFFFFFF as its BTH DestQP, and the port hands one copy to each QP of
// its own attached to the group: the GRH's DGID names the group when the
// packet has one, the DLID when it has not.
//
// Like an IB HCA (and rxe), a port also delivers what it sends to a group
// to its own attached QPs — the sender's too if attached — since no switch
// sends a packet back out of the port it came in by.
//
// RoCE ports do not do multicast yet: AttachMcast refuses them with
// ErrNotSupported.

const (
	// mcastQPN is the BTH DestQP of every multicast packet; no QP has
	// that number.
	mcastQPN = wire.MaxQPN
	// The multicast LIDs; 0xFFFF above them is the permissive LID.
	firstMLID = 0xC000
	lastMLID  = 0xFFFE
	// Limits as rxe's (RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH).
	maxMcastGroups   = 8192
	maxMcastQPAttach = 56
)

func isMulticastLID(lid uint16) bool { return lid >= firstMLID && lid <= lastMLID }

// mcastGroup is a multicast group some of the device's QPs joined.
type mcastGroup struct {
	gid wire.GID
	lid uint16
	qps []*QP // in the order they attached
}

// AttachMcast attaches a UD QP to the group whose MGID is gid and MLID lid
// (ibv_attach_mcast). A QP may join several groups. Attaching a QP to a
// group it is in already does nothing, as with rxe; a group's MLID is the
// one its first member gave. The QP receives the group's datagrams on its
// port while its state lets it receive, each checked against its own
// Q_Key and P_Key and taking one of its receive WQEs.
func (d *Device) AttachMcast(qp *QP, gid wire.GID, lid uint16) error {
	if !d.ownsQP(qp) {
		return ErrNoSuchObject
	}
	if err := d.checkMcast(qp, gid, lid); err != nil {
		return err
	}
	g := d.mcastGroup(gid)
	if g == nil {
		if len(d.mcast) >= maxMcastGroups {
			return errLimit("multicast groups", maxMcastGroups)
		}
		d.mcast = append(d.mcast, mcastGroup{gid: gid, lid: lid})
		g = &d.mcast[len(d.mcast)-1]
	}
	if g.lid != lid {
		return invalid("group %s has MLID %#x, not %#x", gidString(gid), g.lid, lid)
	}
	for _, q := range g.qps {
		if q == qp {
			return nil
		}
	}
	if len(g.qps) >= maxMcastQPAttach {
		return errLimit("QPs attached to a multicast group", maxMcastQPAttach)
	}
	g.qps = append(g.qps, qp)
	qp.mcastGroups++
	return nil
}

// DetachMcast detaches a QP from a group (ibv_detach_mcast); a QP not
// attached to that group and MLID is an error (EINVAL, as rxe and the
// kernel's uverbs give). The last QP to leave a group ends it.
func (d *Device) DetachMcast(qp *QP, gid wire.GID, lid uint16) error {
	if !d.ownsQP(qp) {
		return ErrNoSuchObject
	}
	g := d.mcastGroup(gid)
	if g != nil && g.lid == lid {
		for i, q := range g.qps {
			if q == qp {
				d.leave(g, i)
				return nil
			}
		}
	}
	return invalid("QP %d is not attached to group %s, MLID %#x", qp.Num, gidString(gid), lid)
}

// DetachAllMcast detaches a QP from every group it is in: what the kernel
// does for the QPs of a process that is gone, before it destroys them
// (DestroyQP refuses a QP still attached).
func (d *Device) DetachAllMcast(qp *QP) {
	for k := 0; k < len(d.mcast) && qp.mcastGroups > 0; {
		g := &d.mcast[k]
		i := 0
		for i < len(g.qps) && g.qps[i] != qp {
			i++
		}
		if i == len(g.qps) {
			k++
			continue
		}
		if len(g.qps) == 1 {
			d.leave(g, i) // the group ends: the next one is now at k
			continue
		}
		d.leave(g, i)
		k++
	}
}

// checkMcast checks what ib_attach_mcast checks: a UD QP, a multicast
// GID (ff00::/8) and LID; and that the QP's port is InfiniBand (before it
// has a port: every port of the device).
func (d *Device) checkMcast(qp *QP, gid wire.GID, lid uint16) error {
	if qp.Type != QPTypeUD {
		return invalid("multicast on a %s QP: UD only", qp.Type)
	}
	if gid[0] != 0xFF {
		return invalid("%s is not a multicast GID", gidString(gid))
	}
	if !isMulticastLID(lid) {
		return invalid("LID %#x is not a multicast LID (0xC000..0xFFFE)", lid)
	}
	ports := d.Ports
	if qp.port != nil {
		ports = []*Port{qp.port}
	}
	for _, p := range ports {
		if p.LinkLayer != LinkLayerInfiniBand {
			return notSupported("multicast on a RoCE port (port %d)", p.Num)
		}
	}
	return nil
}

func (d *Device) mcastGroup(gid wire.GID) *mcastGroup {
	for i := range d.mcast {
		if d.mcast[i].gid == gid {
			return &d.mcast[i]
		}
	}
	return nil
}

// leave removes the i-th QP of group g, and the group with its last QP.
func (d *Device) leave(g *mcastGroup, i int) {
	g.qps[i].mcastGroups--
	g.qps = slices.Delete(g.qps, i, i+1)
	if len(g.qps) > 0 {
		return
	}
	k := 0
	for &d.mcast[k] != g {
		k++
	}
	d.mcast = slices.Delete(d.mcast, k, k+1)
}

// onMulticast delivers a packet whose DLID is the multicast LID mlid to
// the port's QPs attached to its group. Only UD datagrams to the
// multicast QPN can be multicast: a packet to a multicast LID with another
// DestQP or of another transport is dropped. A QP in two groups the
// packet matches (two MGIDs with one MLID, no GRH) gets it once.
func (d *Device) onMulticast(now Time, pt *Port, p *wire.Packet, mlid uint16) {
	if p.BTH().DestQP() != mcastQPN {
		pt.Counters.RcvNoQP++
		return
	}
	if p.Opcode.Transport() != wire.UD {
		pt.Counters.RcvBadOpcode++
		return
	}
	var dgid wire.GID
	grh := p.GRH()
	if grh != nil {
		dgid = grh.DGID()
	}
	d.mcastSeq++
	delivered := false
	for i := range d.mcast {
		g := &d.mcast[i]
		if grh != nil && g.gid != dgid || grh == nil && g.lid != mlid {
			continue
		}
		for _, qp := range g.qps {
			if qp.port != pt || qp.mcastSeq == d.mcastSeq {
				continue
			}
			qp.mcastSeq = d.mcastSeq
			delivered = true
			d.deliver(now, pt, qp, p)
		}
	}
	if !delivered {
		pt.Counters.RcvNoQP++
	}
}

// loopMulticast delivers a multicast packet the device just built in
// frame to the port's own attached QPs, as an HCA does: the switch will
// not send it back.
func (d *Device) loopMulticast(now Time, qp *QP, frame []byte) {
	pt := qp.port
	if qp.Type != QPTypeUD || pt.LinkLayer != LinkLayerInfiniBand || len(d.mcast) == 0 ||
		!isMulticastLID(wire.LRH(frame).DLID()) {
		return
	}
	d.receive(now, pt.Num, frame, nil)
}

func gidString(g wire.GID) string { return netip.AddrFrom16(g).String() }
