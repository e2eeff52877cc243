package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/softib/softib/client"
	"github.com/softib/softib/vhca"
)

// devinfo prints what ibv_devinfo prints, in its layout.
func devinfo(opts *client.Options, args []string) error {
	fs := flag.NewFlagSet("devinfo", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "print all the attributes")
	dev := fs.String("d", "", "only this device")
	fs.StringVar(dev, "ib-dev", "", "only this device")
	if err := fs.Parse(args); err != nil {
		return err
	}
	list, err := client.Devices(opts)
	if err != nil {
		return err
	}
	found := false
	for _, d := range list {
		if *dev != "" && d.Name != *dev {
			continue
		}
		found = true
		ctx, err := client.Open(d.Name, opts)
		if err != nil {
			return err
		}
		err = printDevice(os.Stdout, ctx, *verbose)
		ctx.Close()
		if err != nil {
			return err
		}
	}
	if !found {
		if *dev != "" {
			return fmt.Errorf("IB device '%s' wasn't found", *dev)
		}
		fmt.Println("No IB devices found")
	}
	return nil
}

func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xFFFF, g>>16&0xFFFF, g&0xFFFF)
}

var portStates = map[vhca.PortState]string{
	vhca.PortDown: "PORT_DOWN", vhca.PortInit: "PORT_INIT", vhca.PortArmed: "PORT_ARMED", vhca.PortActive: "PORT_ACTIVE",
}

var atomicCaps = map[vhca.AtomicCap]string{vhca.AtomicNone: "ATOMIC_NONE", vhca.AtomicHCA: "ATOMIC_HCA", vhca.AtomicGlob: "ATOMIC_GLOB"}

func printDevice(w io.Writer, ctx *client.Context, verbose bool) error {
	a, err := ctx.QueryDevice()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "hca_id:\t%s\n", ctx.Name)
	fmt.Fprintf(w, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%s\n", guidString(a.SysImageGUID))
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		rows := []struct {
			k string
			v any
		}{
			{"max_mr_size", fmt.Sprintf("0x%x", a.MaxMRSize)}, {"page_size_cap", fmt.Sprintf("0x%x", a.PageSizeCap)},
			{"max_qp", a.MaxQP}, {"max_qp_wr", a.MaxQPWR}, {"max_sge", a.MaxSGE}, {"max_cq", a.MaxCQ},
			{"max_cqe", a.MaxCQE}, {"max_mr", a.MaxMR}, {"max_pd", a.MaxPD}, {"max_qp_rd_atom", a.MaxQPRdAtom},
			{"max_res_rd_atom", a.MaxResRdAtom}, {"max_qp_init_rd_atom", a.MaxQPInitRdAtom},
			{"atomic_cap", fmt.Sprintf("%s (%d)", atomicCaps[a.AtomicCap], a.AtomicCap)},
			{"max_ah", a.MaxAH}, {"max_srq", a.MaxSRQ}, {"max_srq_wr", a.MaxSRQWR}, {"max_srq_sge", a.MaxSRQSGE},
			{"max_pkeys", a.MaxPKeys}, {"local_ca_ack_delay", a.LocalCACKDelay},
		}
		for _, r := range rows {
			fmt.Fprintf(w, "\t%s:%s%v\n", r.k, tabsFor(r.k, 1), r.v)
		}
	}
	for port := 1; port <= a.PhysPortCnt; port++ {
		p, err := ctx.QueryPort(port)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\t\tport:\t%d\n", port)
		fmt.Fprintf(w, "\t\t\tstate:\t\t\t%s (%d)\n", portStates[p.State], p.State)
		fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%d (%d)\n", p.MaxMTU.Bytes(), p.MaxMTU)
		fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%d (%d)\n", p.ActiveMTU.Bytes(), p.ActiveMTU)
		fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t%d\n", p.SMLID)
		fmt.Fprintf(w, "\t\t\tport_lid:\t\t%d\n", p.LID)
		fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x%02x\n", p.LMC)
		ll := "InfiniBand"
		if p.LinkLayer == vhca.LinkLayerEthernet {
			ll = "Ethernet"
		}
		fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%s\n", ll)
		if verbose && p.Netdev != "" {
			// softib's own: the netdev and the path RoCEv2 takes.
			fmt.Fprintf(w, "\t\t\tnetdev:\t\t\t%s\n", p.Netdev)
			fmt.Fprintf(w, "\t\t\tdata_path:\t\t%v (of %v)\n", p.Path, p.Paths)
		}
		if verbose {
			fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSize)
			fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTblLen)
			fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTblLen)
			for i := range p.GIDTblLen {
				g, err := ctx.QueryGID(port, i)
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s, %s\n", i, netip.AddrFrom16(g.GID), gidTypeName(g.Type))
			}
		}
		fmt.Fprintln(w)
	}
	return nil
}

// tabsFor pads a "key:" to ibv_devinfo's tab stops.
func tabsFor(k string, indent int) string {
	width := indent*8 + len(k) + 1
	n := (40 - width + 7) / 8
	if n < 1 {
		n = 1
	}
	s := ""
	for range n {
		s += "\t"
	}
	return s
}

func gidTypeName(t vhca.GIDType) string {
	switch t {
	case vhca.GIDTypeRoCEv1:
		return "RoCE v1"
	case vhca.GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "IB"
}
