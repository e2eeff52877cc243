package wire

import "fmt"

// encoded is one packet of the corpus softib encodes: its headers, its
// payload and a label for failure messages.
type encoded struct {
	label   string
	h       Headers
	payload []byte
}

// corpusEncaps are the encapsulations every opcode is encoded in.
var corpusEncaps = []struct {
	encap Encap
	grh   bool
}{
	{EncapRoCEv2IPv4, false},
	{EncapRoCEv2IPv6, false},
	{EncapRoCEv1, false},
	{EncapIB, false},
	{EncapIB, true},
}

// syndromes are the AETH syndromes each acknowledge opcode is encoded
// with: ACKs with and without credits, RNR NAKs, every NAK code.
var syndromes = []Syndrome{
	ACKSyndrome(CreditCountInvalid), ACKSyndrome(0), ACKSyndrome(7),
	RNRNAKSyndrome(0), RNRNAKSyndrome(14), RNRNAKSyndrome(31),
	NAKSyndrome(NAKPSNSequenceError), NAKSyndrome(NAKInvalidRequest),
	NAKSyndrome(NAKRemoteAccessError), NAKSyndrome(NAKRemoteOperational),
	NAKSyndrome(NAKInvalidRDRequest),
}

// corpusPayload returns n bytes of a pattern that Wireshark's RDMA
// upper-layer heuristics (RPC-over-RDMA, Ethernet over IB ...) do not
// take for their own: they call some payloads of other shapes malformed,
// which says nothing about the IBA headers.
func corpusPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*37 + 11)
	}
	return b
}

// encodedCorpus is every opcode IBA 1.4 defines in every encapsulation,
// each acknowledge opcode with every kind of syndrome, payloads of a full
// 256-byte MTU on first and middle packets and an odd length (so a pad)
// on last and only packets.
func encodedCorpus() []encoded {
	var out []encoded
	psn := uint32(0xFFFFF0) // wraps through zero on the way
	for _, e := range corpusEncaps {
		for _, op := range Opcodes() {
			info := op.Info()
			syns := []Syndrome{ACKSyndrome(CreditCountInvalid)}
			if info.Operation == OpAcknowledge {
				syns = syndromes
			}
			for _, syn := range syns {
				h := corpusHeaders(e.encap, e.grh)
				h.Opcode = op
				h.PSN = psn
				psn = (psn + 1) & MaxPSN
				h.Syndrome = syn
				h.MSN = 0x10203
				h.AckReq = !info.Response && (info.Position == Last || info.Position == Only) &&
					(info.Transport == RC || info.Transport == XRC || info.Transport == RD)
				var payload []byte
				if info.Payload {
					n := 61
					if info.Position == First || info.Position == Middle {
						n = 256
					}
					payload = corpusPayload(n)
					h.DMALen = uint32(len(payload))
				} else if info.Operation == OpRDMARead {
					h.DMALen = 4096
				}
				label := fmt.Sprintf("%s %s", e.encap, op)
				if e.grh {
					label += " GRH"
				}
				if len(syns) > 1 {
					label += " " + syn.String()
				}
				out = append(out, encoded{label, h, payload})
			}
		}
	}
	return out
}

func corpusHeaders(e Encap, grh bool) Headers {
	h := Headers{
		Encap:  e,
		DstMAC: MAC{0x02, 0, 0, 0, 0, 0x02},
		SrcMAC: MAC{0x02, 0, 0, 0, 0, 0x01},
		PKey:   DefaultPKey,
		// Not QP0/QP1: Wireshark decodes their payloads as MADs.
		DestQP:    0x000123,
		QKey:      0x11111111,
		SrcQP:     0x000456,
		EEContext: 0x000789,
		XRCSRQ:    0x0000AB,
		VA:        0x00007F0000001000,
		RKey:      0x1234ABCD,
		SwapAdd:   0x0102030405060708,
		Compare:   0x1112131415161718,
		OrigRemDt: 0x2122232425262728,
		Imm:       0xDEADBEEF,
		InvRKey:   0x0BADCAFE,
		HopLimit:  64,
		GRH:       grh,
	}
	switch e {
	case EncapRoCEv2IPv4:
		h.SGID = IPv4MappedGID([4]byte{192, 0, 2, 1})
		h.DGID = IPv4MappedGID([4]byte{192, 0, 2, 2})
		h.DontFragment = true
		h.IPID = 0x1234
		h.UDPSrcPort = 0xC123
	case EncapRoCEv2IPv6, EncapRoCEv1:
		h.SGID = GID{0x20, 0x01, 0x0d, 0xb8, 15: 1}
		h.DGID = GID{0x20, 0x01, 0x0d, 0xb8, 15: 2}
		h.FlowLabel = 0x12345
		h.TClass = 0x68
		h.UDPSrcPort = 0xC345
	case EncapIB:
		h.SLID, h.DLID = 1, 2
		h.SGID = GID{0xfe, 0x80, 8: 0x00, 0x02, 0xc9, 0x03, 0x00, 0x00, 0x00, 0x01}
		h.DGID = GID{0xfe, 0x80, 8: 0x00, 0x02, 0xc9, 0x03, 0x00, 0x00, 0x00, 0x02}
		h.SL, h.VL = 3, 1
	}
	return h
}

// project keeps of h only the fields its encapsulation and opcode carry:
// what a parse of the packet can give back.
func project(h Headers) Headers {
	out := Headers{Encap: h.Encap, Opcode: h.Opcode, SE: h.SE, MigReq: h.MigReq, PKey: h.PKey,
		FECN: h.FECN, BECN: h.BECN, DestQP: h.DestQP, AckReq: h.AckReq, PSN: h.PSN}
	if h.Encap.Ethernet() {
		out.DstMAC, out.SrcMAC, out.VLAN, out.VLANTCI = h.DstMAC, h.SrcMAC, h.VLAN, h.VLANTCI
	}
	switch {
	case h.Encap == EncapRoCEv2IPv4:
		out.SGID, out.DGID, out.TClass, out.HopLimit = h.SGID, h.DGID, h.TClass, h.HopLimit
		out.IPID, out.DontFragment, out.UDPSrcPort = h.IPID, h.DontFragment, h.UDPSrcPort
	case h.Encap == EncapRoCEv2IPv6:
		out.SGID, out.DGID, out.TClass, out.HopLimit, out.FlowLabel = h.SGID, h.DGID, h.TClass, h.HopLimit, h.FlowLabel
		out.UDPSrcPort = h.UDPSrcPort
	case h.Encap == EncapRoCEv1 || h.Encap == EncapIB && h.GRH:
		out.SGID, out.DGID, out.TClass, out.HopLimit, out.FlowLabel = h.SGID, h.DGID, h.TClass, h.HopLimit, h.FlowLabel
	}
	if h.Encap == EncapIB {
		out.VL, out.SL, out.DLID, out.SLID, out.GRH = h.VL, h.SL, h.DLID, h.SLID, h.GRH
	}
	info := h.Opcode.Info()
	if info.Has(HdrRDETH) {
		out.EEContext = h.EEContext
	}
	if info.Has(HdrDETH) {
		out.QKey, out.SrcQP = h.QKey, h.SrcQP
	}
	if info.Has(HdrXRCETH) {
		out.XRCSRQ = h.XRCSRQ
	}
	if info.Has(HdrRETH) {
		out.VA, out.RKey, out.DMALen = h.VA, h.RKey, h.DMALen
	}
	if info.Has(HdrAtomicETH) {
		out.VA, out.RKey, out.SwapAdd, out.Compare = h.VA, h.RKey, h.SwapAdd, h.Compare
	}
	if info.Has(HdrAETH) {
		out.Syndrome, out.MSN = h.Syndrome, h.MSN
	}
	if info.Has(HdrAtomicAckETH) {
		out.OrigRemDt = h.OrigRemDt
	}
	if info.Has(HdrImmDt) {
		out.Imm = h.Imm
	}
	if info.Has(HdrIETH) {
		out.InvRKey = h.InvRKey
	}
	return out
}
