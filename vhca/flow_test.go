package vhca

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softib/softib/vhca/wire"
)

// TestUDPSourcePortsMatchRxe checks the RoCEv2 UDP source ports softib
// computes against the reference captures of Linux rxe: for QPs connected
// without RDMA CM, 0xC000 | a fold of the flow label that
// rdma_calc_flow_label derives from the two QPNs (the same both ways); for
// UD, 0xC000 + hash_32(source QPN, 14).
func TestUDPSourcePortsMatchRxe(t *testing.T) {
	files, _ := filepath.Glob("wire/testdata/rxe/*.pcap")
	if len(files) == 0 {
		t.Fatal("no reference captures")
	}
	checked := 0
	for _, path := range files {
		if strings.Contains(path, "_cm") {
			continue // RDMA CM chooses its own flow label
		}
		var rc, ud []wire.Packet
		for _, frame := range readFrames(t, path) {
			var p wire.Packet
			if err := wire.ParseEthernet(frame, &p); err != nil {
				continue
			}
			if p.Opcode.Transport() == wire.UD {
				ud = append(ud, p)
			} else {
				rc = append(rc, p)
			}
		}
		qpns := map[uint32]bool{}
		for i := range rc {
			qpns[rc[i].BTH().DestQP()] = true
		}
		if len(rc) > 0 {
			var pair []uint32
			for q := range qpns {
				pair = append(pair, q)
			}
			switch len(pair) {
			case 1: // both hosts gave their QP the same number
				pair = append(pair, pair[0])
			case 2:
			default:
				t.Fatalf("%s: %d destination QPNs in one connected exchange", path, len(pair))
			}
			want := udpSourcePort(flowLabel(pair[0], pair[1], 0))
			for i := range rc {
				if got := rc[i].UDP().SrcPort(); got != want {
					t.Fatalf("%s: %s from port %#x, want %#x (QPNs %#x, %#x)", path, rc[i].Opcode, got, want, pair[0], pair[1])
				}
				checked++
			}
		}
		for i := range ud {
			if got, want := ud[i].UDP().SrcPort(), udUDPSourcePort(ud[i].DETH().SrcQP()); got != want {
				t.Fatalf("%s: UD from QP %#x on port %#x, want %#x", path, ud[i].DETH().SrcQP(), got, want)
			}
			checked++
		}
	}
	t.Logf("%d packets' source ports match", checked)
}

func readFrames(t *testing.T, path string) [][]byte {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := wire.NewPcapReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(rec.Data))
	}
}
