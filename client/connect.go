package client

import (
	"github.com/softib/softib/vhca"
	"github.com/softib/softib/vhca/wire"
)

// Endpoint is what two programs tell each other to connect their QPs
// (what the pingpongs and perftest exchange over TCP).
type Endpoint struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID wire.GID
}

// Path is how to take a QP from RESET to RTS towards Remote: the usual
// INIT, RTR, RTS sequence in one call, with the values rdma-core's
// examples and perftest use where a field is zero.
type Path struct {
	Port     int         // 1
	GIDIndex int         // the local GID the packets leave from
	MTU      MTU         // MTU1024
	SL       uint8       //
	Access   vhca.Access // remote access the QP grants (RC/UC)
	LocalPSN uint32
	Remote   Endpoint
	QKey     uint32 // UD
	// RC timers: Timeout 14 (67 ms), RetryCnt 7, RNRRetry 7,
	// MinRNRTimer 12 (0.64 ms); MaxRdAtomic 16 both ways.
	Timeout, RetryCnt, RNRRetry, MinRNRTimer, MaxRdAtomic uint8
}

func orDefault(v, d uint8) uint8 {
	if v == 0 {
		return d
	}
	return v
}

// Connect moves the QP from RESET through INIT and RTR to RTS.
func (qp *QP) Connect(p Path) error {
	if p.Port == 0 {
		p.Port = 1
	}
	if p.MTU == 0 {
		p.MTU = vhca.MTU1024
	}
	a := QPAttr{State: vhca.QPStateInit, Port: uint8(p.Port), PKeyIndex: 0}
	mask := vhca.QPAttrState | vhca.QPAttrPKeyIndex | vhca.QPAttrPort
	if qp.Type == vhca.QPTypeUD {
		a.QKey = p.QKey
		mask |= vhca.QPAttrQKey
	} else {
		a.AccessFlags = p.Access
		mask |= vhca.QPAttrAccessFlags
	}
	if err := qp.Modify(&a, mask); err != nil {
		return err
	}
	a = QPAttr{State: vhca.QPStateRTR}
	mask = vhca.QPAttrState
	if qp.Type != vhca.QPTypeUD {
		a.PathMTU = p.MTU
		a.DestQPN = p.Remote.QPN
		a.RQPSN = p.Remote.PSN
		// With the remote's GID the path is global (a GRH: RoCE always,
		// IB across routers); without it, IB routes by LID alone.
		a.AV = AV{DLID: p.Remote.LID, SL: p.SL, Port: uint8(p.Port), IsGlobal: p.Remote.GID != (wire.GID{}),
			GRH: vhca.GlobalRoute{DGID: p.Remote.GID, SGIDIndex: uint8(p.GIDIndex), HopLimit: 64}}
		mask |= vhca.QPAttrAV | vhca.QPAttrPathMTU | vhca.QPAttrDestQPN | vhca.QPAttrRQPSN
		if qp.Type == vhca.QPTypeRC {
			a.MaxDestRdAtomic = orDefault(p.MaxRdAtomic, 16)
			a.MinRNRTimer = orDefault(p.MinRNRTimer, 12)
			mask |= vhca.QPAttrMaxDestRdAtomic | vhca.QPAttrMinRNRTimer
		}
	}
	if err := qp.Modify(&a, mask); err != nil {
		return err
	}
	a = QPAttr{State: vhca.QPStateRTS, SQPSN: p.LocalPSN}
	mask = vhca.QPAttrState | vhca.QPAttrSQPSN
	if qp.Type == vhca.QPTypeRC {
		a.Timeout = orDefault(p.Timeout, 14)
		a.RetryCnt = orDefault(p.RetryCnt, 7)
		a.RNRRetry = orDefault(p.RNRRetry, 7)
		a.MaxRdAtomic = orDefault(p.MaxRdAtomic, 16)
		mask |= vhca.QPAttrTimeout | vhca.QPAttrRetryCnt | vhca.QPAttrRNRRetry | vhca.QPAttrMaxQPRdAtomic
	}
	return qp.Modify(&a, mask)
}
