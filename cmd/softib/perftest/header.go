package perftest

import (
	"fmt"
	"io"
	"strings"
)

// TestInfo holds what ctx_print_test_info prints in the banner before the
// destinations are exchanged.
type TestInfo struct {
	Test       Test
	AtomicType AtomicType // printed for atomic tests
	Duplex     bool       // -b: "Bidirectional"
	PostList   int        // -l; "Post List" when > 1
	UseEvent   bool       // -e
	EQNum      int        // completion vector of -e
	Device     string     // ib_devname
	DualPort   bool
	NumQPs     int
	Transport  string // transport_str: "IB" (also for RoCE), "IW" or "Unknown"
	ConnType   ConnType
	UseSRQ     bool

	// The "PCIe relax order" line depends on how perftest was built:
	// HaveRO (relaxed ordering support) and HaveTDAPI (thread domains).
	HaveRO, HaveTDAPI bool
	DisablePCIeRelax  bool // --disable_pcie_relaxed
	NoLock            bool // lock-free (thread domain) mode
	ROWarning         bool // the CPU is not relaxed-ordering compliant

	UseOldPostSend  bool // --use_old_post_send: "ibv_wr* API : OFF"
	EnhancedReorder bool

	Client       bool // the side that connects
	TxDepth      int
	RecvPostList int
	RxDepth      int
	CQMod        int    // bw tests
	CQEPoll      uint16 // bw tests
	DynamicCQE   bool   // bw tests: "CQE Poll Batch : Dynamic"
	MTUBytes     int
	LinkType     string // link_layer_str: "IB", "Ethernet" or "Unknown"
	GIDIndex     int    // -1 (DEF_GID_INDEX) for none
	GIDIndex2    int    // dual port, -1 for none
	InlineSize   int
	OutReads     int
	NUMANode     int // -1 for none
}

// FormatTestInfo prints the banner as ctx_print_test_info does for a run
// without rdma_cm, at full verbosity. perftest builds with ROCm, MUSA, DCS
// or AES-XTS support print extra lines that are not reproduced.
func FormatTestInfo(w io.Writer, ti TestInfo) error {
	var b strings.Builder
	onOff := func(v bool) string {
		if v {
			return "ON"
		}
		return "OFF"
	}
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString(ti.Test.Verb.String() + " ")
	if ti.Test.Verb == VerbAtomic {
		b.WriteString(ti.AtomicType.String() + " ")
	}
	switch ti.Test.Type {
	case TypeBW:
		if ti.Duplex {
			b.WriteString("Bidirectional ")
		}
		if ti.PostList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	case TypeLat:
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	if ti.UseEvent {
		fmt.Fprintf(&b, " Test with events. Using %s_comp%d\n", ti.Device, ti.EQNum)
	}
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", onOff(ti.DualPort), ti.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", ti.NumQPs, ti.Transport)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", ti.ConnType, onOff(ti.UseSRQ))
	switch {
	case ti.HaveRO:
		lock := "Unsupported"
		if ti.HaveTDAPI {
			lock = onOff(ti.NoLock)
		}
		fmt.Fprintf(&b, " PCIe relax order: %s\t\tLock-free      : %s\n", onOff(!ti.DisablePCIeRelax), lock)
		if ti.ROWarning && !ti.DisablePCIeRelax {
			b.WriteString(" WARNING: CPU is not PCIe relaxed ordering compliant.\n")
			b.WriteString(" WARNING: You should disable PCIe RO with `--disable_pcie_relaxed` for both server and client.\n")
		}
	case ti.HaveTDAPI:
		fmt.Fprintf(&b, " PCIe relax order: %s\t\tLock-free      : %s\n", "Unsupported", onOff(ti.NoLock))
	default:
		// perftest's own format has a tab here instead of the spaces.
		fmt.Fprintf(&b, " PCIe relax order: %s\t\tLock-free\t: %s\n", "Unsupported", "Unsupported")
	}
	fmt.Fprintf(&b, " ibv_wr* API     : %s\t\tUsing Enhanced Reorder      : %s\n", onOff(!ti.UseOldPostSend), onOff(ti.EnhancedReorder))
	if ti.Client || ti.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", ti.TxDepth)
	}
	if ti.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", ti.PostList)
	}
	if ti.RecvPostList > 1 {
		fmt.Fprintf(&b, " Recv Post List  : %d\n", ti.RecvPostList)
	}
	if ti.Test.Verb.hasRecvComp() && (!ti.Client || ti.Duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", ti.RxDepth)
	}
	if ti.Test.Type == TypeBW {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", ti.CQMod)
		if ti.DynamicCQE {
			b.WriteString(" CQE Poll Batch  : Dynamic\n")
		} else {
			fmt.Fprintf(&b, " CQE Poll Batch  : %d\n", ti.CQEPoll)
		}
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", ti.MTUBytes)
	fmt.Fprintf(&b, " Link type       : %s\n", ti.LinkType)
	if ti.GIDIndex != -1 {
		fmt.Fprintf(&b, " GID index       : %d\n", ti.GIDIndex)
	}
	if ti.DualPort && ti.GIDIndex2 != -1 {
		fmt.Fprintf(&b, " GID index2      : %d\n", ti.GIDIndex2)
	}
	if ti.Test.Verb != VerbRead && ti.Test.Verb != VerbAtomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", ti.InlineSize)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", ti.OutReads)
	}
	b.WriteString(" rdma_cm QPs\t : OFF\n")
	b.WriteString(" Data ex. method : Ethernet\n")
	if ti.NUMANode >= 0 {
		fmt.Fprintf(&b, " NUMA node       : %d\n", ti.NUMANode)
	}
	b.WriteString(ResultLine)
	_, err := io.WriteString(w, b.String())
	return err
}

// Side says whose destination FormatDest prints.
type Side int

const (
	Local  Side = iota // "local address"
	Remote             // "remote address"
)

// DestPrint says how ctx_print_pingpong_data prints a destination.
type DestPrint struct {
	Verb     Verb
	ConnType ConnType // XRC and DC print the SRQ number
	// ShowGID prints the GID line; perftest does when a GID index is in
	// use (gid_index > -1), except on RawEth.
	ShowGID bool
	// MGID names the GID line "MGID" (multicast tests).
	MGID bool
}

// FormatDest prints a destination as ctx_print_pingpong_data does:
//
//	" %s address: LID %#04x QPN %#06x PSN %#06x"
//	+ READ:  " OUT %#04x", then as WRITE
//	+ WRITE: " RKey %#08x VAddr %#016llx"
//	+ XRC/DC: " SRQn %#08x"
//	"\n"
//	+ " GID: %02d:%02d:...\n" with the 16 GID bytes in *decimal*
//
// C's '#' flag prints zero without "0x", so LID 0 shows as "0000".
func FormatDest(w io.Writer, side Side, d Dest, p DestPrint) error {
	var b strings.Builder
	name := "local"
	if side == Remote {
		name = "remote"
	}
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", name,
		cAltHex(uint64(d.LID), 4), cAltHex(uint64(d.QPN), 6), cAltHex(uint64(d.PSN), 6))
	switch p.Verb {
	case VerbRead:
		fmt.Fprintf(&b, " OUT %s", cAltHex(uint64(d.OutReads), 4))
		fallthrough
	case VerbWrite:
		fmt.Fprintf(&b, " RKey %s VAddr %s", cAltHex(uint64(d.RKey), 8), cAltHex(d.VAddr, 16))
	}
	if p.ConnType == ConnXRC || p.ConnType == ConnDC {
		fmt.Fprintf(&b, " SRQn %s", cAltHex(uint64(d.SRQN), 8))
	}
	b.WriteByte('\n')
	if p.ShowGID && p.ConnType != ConnRawEth {
		label := "GID"
		if p.MGID {
			label = "MGID"
		}
		fmt.Fprintf(&b, " %s: ", label)
		for i, g := range d.GID {
			if i > 0 {
				b.WriteByte(':')
			}
			fmt.Fprintf(&b, "%02d", g)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
