package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/softib/softib/client"
	"github.com/softib/softib/cmd/softib/pingpong"
	"github.com/softib/softib/vhca"
)

// pingpongCmd is ibv_rc_pingpong (-T uc: ibv_uc_pingpong, -T ud:
// ibv_ud_pingpong) on softib: same flags, output and TCP exchange, so
// either side can be rdma-core's program.
func pingpongCmd(opts *client.Options, args []string) error {
	transport := "rc"
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case (a == "-T" || a == "--transport") && i+1 < len(args):
			transport = args[i+1]
			i++
		case strings.HasPrefix(a, "-T") && len(a) > 2:
			transport = a[2:]
		case strings.HasPrefix(a, "--transport="):
			transport = strings.TrimPrefix(a, "--transport=")
		default:
			rest = append(rest, a)
		}
	}
	f, err := pingpong.ParseFlags(transport, rest)
	if err != nil {
		return err
	}
	return runPingpong(opts, f)
}

type ppRun struct {
	f      pingpong.Flags
	ctx    *client.Context
	pd     *client.PD
	mr     *client.MR
	ch     *client.CompChannel
	cq     *client.CQ
	qp     *client.QP
	ah     *client.AH
	remote pingpong.Dest
	send   [1]client.SendWR
	recv   []client.RecvWR
}

func runPingpong(opts *client.Options, f pingpong.Flags) error {
	r := &ppRun{f: f}
	ud := f.Transport == pingpong.UD
	ctx, err := client.Open(f.IBDev, opts)
	if err != nil {
		return err
	}
	defer ctx.Close()
	r.ctx = ctx
	size := int(f.Size)
	if ud {
		size += pingpong.GRHSize
	}
	buf, err := ctx.Alloc(size)
	if err != nil {
		return err
	}
	for i := range buf.B {
		buf.B[i] = pingpong.BufFill
	}
	if r.pd, err = ctx.AllocPD(); err != nil {
		return err
	}
	if r.mr, err = r.pd.RegMR(buf.B, vhca.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	if f.Events {
		if r.ch, err = ctx.CreateCompChannel(); err != nil {
			return err
		}
	}
	if r.cq, err = ctx.CreateCQ(int(f.RxDepth)+1, r.ch); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	qt := map[pingpong.Transport]vhca.QPType{pingpong.RC: vhca.QPTypeRC, pingpong.UC: vhca.QPTypeUC, pingpong.UD: vhca.QPTypeUD}[f.Transport]
	r.qp, err = r.pd.CreateQP(client.QPInitAttr{Type: qt, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: client.QPCap{MaxSendWR: 1, MaxRecvWR: int(f.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("Couldn't create QP: %w", err)
	}
	init := client.QPAttr{State: vhca.QPStateInit, Port: uint8(f.IBPort)}
	mask := vhca.QPAttrState | vhca.QPAttrPKeyIndex | vhca.QPAttrPort
	if ud {
		init.QKey = pingpong.UDQKey
		mask |= vhca.QPAttrQKey
	} else {
		mask |= vhca.QPAttrAccessFlags
	}
	if err := r.qp.Modify(&init, mask); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	// The receive buffer is the whole buffer (ud: with room for the GRH);
	// sends go from the start (ud: after the GRH room).
	sendAddr := r.mr.Addr
	if ud {
		sendAddr += pingpong.GRHSize
	}
	r.send[0] = client.SendWR{WRID: pingpong.SendWRID, Opcode: vhca.WRSend, Flags: vhca.SendSignaled,
		SGL: []client.SGE{{Addr: sendAddr, Length: f.Size, LKey: r.mr.LKey}}, RemoteQKey: pingpong.UDQKey}
	r.recv = make([]client.RecvWR, f.RxDepth)
	for i := range r.recv {
		r.recv[i] = client.RecvWR{WRID: pingpong.RecvWRID, SGL: []client.SGE{{Addr: r.mr.Addr, Length: uint32(size), LKey: r.mr.LKey}}}
	}
	if n, err := r.qp.PostRecv(r.recv); n < len(r.recv) {
		return fmt.Errorf("Couldn't post receive (%d): %v", n, err)
	}
	if f.Events {
		r.cq.ReqNotify(false)
	}
	pa, err := ctx.QueryPort(f.IBPort)
	if err != nil {
		return fmt.Errorf("Couldn't get port info: %w", err)
	}
	local := pingpong.Dest{LID: pa.LID, QPN: r.qp.Num, PSN: pingpong.RandomPSN()}
	if !ud && pa.LinkLayer != vhca.LinkLayerEthernet && pa.LID == 0 {
		return fmt.Errorf("Couldn't get local LID")
	}
	if f.GIDIndex >= 0 {
		g, err := ctx.QueryGID(f.IBPort, f.GIDIndex)
		if err != nil {
			return fmt.Errorf("can't read sgid of index %d: %w", f.GIDIndex, err)
		}
		local.GID = g.GID
	}
	fmt.Print(pingpong.LocalAddressLine(f.Transport, local))
	connect := func(remote pingpong.Dest) error { return r.connect(local, remote) }
	bg := context.Background()
	var sess *pingpong.Session
	if f.IsServer() {
		r.remote, sess, err = pingpong.ServerExchange(bg, f.Port, local, connect)
		if err == nil {
			err = sess.Done()
		}
	} else {
		r.remote, sess, err = pingpong.ClientExchange(bg, f.ServerName, f.Port, local)
		if err == nil {
			if err = sess.Done(); err == nil {
				err = connect(r.remote)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("Couldn't get remote LID: %w", err)
	}
	fmt.Print(pingpong.RemoteAddressLine(r.remote))
	return r.loop()
}

// connect moves the QP to RTR and RTS as the C programs do.
func (r *ppRun) connect(local, remote pingpong.Dest) error {
	f := r.f
	av := client.AV{DLID: remote.LID, SL: uint8(f.SL), Port: uint8(f.IBPort)}
	if remote.IsGlobal() {
		av.IsGlobal = true
		av.GRH = vhca.GlobalRoute{DGID: remote.GID, SGIDIndex: uint8(max(f.GIDIndex, 0)), HopLimit: f.Transport.HopLimit()}
	}
	if f.Transport == pingpong.UD {
		if err := r.qp.Modify(&client.QPAttr{State: vhca.QPStateRTR}, vhca.QPAttrState); err != nil {
			return fmt.Errorf("Failed to modify QP to RTR: %w", err)
		}
		if err := r.qp.Modify(&client.QPAttr{State: vhca.QPStateRTS, SQPSN: local.PSN}, vhca.QPAttrState|vhca.QPAttrSQPSN); err != nil {
			return fmt.Errorf("Failed to modify QP to RTS: %w", err)
		}
		ah, err := r.pd.CreateAH(av)
		if err != nil {
			return fmt.Errorf("Failed to create AH: %w", err)
		}
		r.ah = ah
		r.send[0].AH, r.send[0].RemoteQPN = ah, remote.QPN
		return nil
	}
	rtr := client.QPAttr{State: vhca.QPStateRTR, PathMTU: vhca.MTU(pingpong.MTUEnum(f.MTU)), DestQPN: remote.QPN,
		RQPSN: remote.PSN, AV: av}
	mask := vhca.QPAttrState | vhca.QPAttrAV | vhca.QPAttrPathMTU | vhca.QPAttrDestQPN | vhca.QPAttrRQPSN
	if f.Transport == pingpong.RC {
		rtr.MaxDestRdAtomic, rtr.MinRNRTimer = pingpong.RCMaxDestRdAtomic, pingpong.RCMinRNRTimer
		mask |= vhca.QPAttrMaxDestRdAtomic | vhca.QPAttrMinRNRTimer
	}
	if err := r.qp.Modify(&rtr, mask); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	rts := client.QPAttr{State: vhca.QPStateRTS, SQPSN: local.PSN}
	mask = vhca.QPAttrState | vhca.QPAttrSQPSN
	if f.Transport == pingpong.RC {
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = pingpong.RCTimeout, pingpong.RCRetryCnt, pingpong.RCRNRRetry, pingpong.RCMaxRdAtomic
		mask |= vhca.QPAttrTimeout | vhca.QPAttrRetryCnt | vhca.QPAttrRNRRetry | vhca.QPAttrMaxQPRdAtomic
	}
	if err := r.qp.Modify(&rts, mask); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

// loop is the ping-pong: the client sends first; each side sends again
// once its last send completed and the peer's message arrived.
func (r *ppRun) loop() error {
	f := r.f
	start := time.Now()
	if !f.IsServer() {
		if _, err := r.qp.PostSend(r.send[:]); err != nil {
			return fmt.Errorf("Couldn't post send: %w", err)
		}
	}
	l := pingpong.NewLoop(f.Iters, f.RxDepth, !f.IsServer())
	var wc [2]client.WC
	for !l.Finished() {
		if f.Events {
			if _, err := r.ch.GetEvent(context.Background()); err != nil {
				return fmt.Errorf("Failed to get cq_event: %w", err)
			}
			if err := r.cq.ReqNotify(false); err != nil {
				return fmt.Errorf("Couldn't request CQ notification: %w", err)
			}
		}
		for {
			n, err := r.cq.Poll(wc[:])
			if err != nil {
				return fmt.Errorf("poll CQ failed %w", err)
			}
			if n == 0 {
				client.Relax()
			}
			for i := range n {
				if wc[i].Status != vhca.WCSuccess {
					return fmt.Errorf("Failed status %s (%d) for wr_id %d", wc[i].Status, wc[i].Status, wc[i].WRID)
				}
				st, err := l.Complete(wc[i].WRID)
				if err != nil {
					return err
				}
				if st.Repost > 0 {
					if k, err := r.qp.PostRecv(r.recv[:st.Repost]); k < st.Repost {
						return fmt.Errorf("Couldn't post receive (%d): %v", k, err)
					}
				}
				if st.Send {
					if _, err := r.qp.PostSend(r.send[:]); err != nil {
						return fmt.Errorf("Couldn't post send: %w", err)
					}
				}
			}
			if n > 0 || !f.Events || l.Finished() {
				if n == 0 || l.Finished() {
					break
				}
				continue
			}
			break
		}
	}
	fmt.Print(pingpong.ResultLines(f.Size, f.Iters, time.Since(start)))
	os.Stdout.Sync()
	return nil
}
